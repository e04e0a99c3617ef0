{{ config(materialized='view', alias='orders') }}
select * from {{ source('shop', 'orders') }}
