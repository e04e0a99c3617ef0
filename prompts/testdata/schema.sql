CREATE TABLE stores (
  id integer PRIMARY KEY,
  name text NOT NULL, -- store name; examples: 'Downtown LA', 'Brooklyn Heights'
  city text, -- examples: 'Los Angeles', 'New York', 'Chicago'
  opened_on date -- day the store opened
);

CREATE TABLE customers (
  id integer PRIMARY KEY,
  full_name text NOT NULL, -- examples: 'Ana Silva', 'Bob O''Neil'
  email text,
  city text, -- home city; examples: 'Los Angeles', 'San Diego'
  "Loyalty Tier" text, -- examples: 'gold', 'silver', 'none'
  created_at timestamptz NOT NULL -- sign-up time
);

CREATE TABLE products (
  id integer PRIMARY KEY,
  sku text NOT NULL UNIQUE, -- examples: 'TS-001', 'MUG-12'
  name text NOT NULL, -- examples: 'Classic T-Shirt', 'Coffee Mug'
  category text, -- examples: 'apparel', 'kitchen', 'toys'
  unit_price numeric(10,2) NOT NULL -- list price in USD
);

CREATE TABLE orders (
  id integer PRIMARY KEY,
  customer_id integer NOT NULL REFERENCES customers(id),
  store_id integer REFERENCES stores(id), -- NULL for online orders
  status text NOT NULL, -- examples: 'paid', 'shipped', 'refunded'
  ordered_at timestamptz NOT NULL
);

CREATE TABLE order_items (
  order_id integer NOT NULL REFERENCES orders(id),
  product_id integer NOT NULL REFERENCES products(id),
  quantity integer NOT NULL,
  unit_price numeric(10,2) NOT NULL, -- price paid per unit, after discounts
  PRIMARY KEY (order_id, product_id)
);
