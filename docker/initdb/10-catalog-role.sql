-- The catalog's read-only role (README, "The catalog role"). The postgres
-- image runs this once, as POSTGRES_USER in POSTGRES_DB, when it creates the
-- data directory. Change the password here and in compose.yaml's
-- NLPROXY_CATALOG_DSN together.
CREATE ROLE nlproxy_catalog LOGIN PASSWORD 'catalog';
GRANT USAGE ON SCHEMA public TO nlproxy_catalog;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO nlproxy_catalog;
-- Tables the application creates later are readable too.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO nlproxy_catalog;
