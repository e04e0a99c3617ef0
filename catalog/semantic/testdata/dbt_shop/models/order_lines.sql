{{ config(materialized='view', alias='order_lines') }}
select * from {{ source('shop', 'order_lines') }}
