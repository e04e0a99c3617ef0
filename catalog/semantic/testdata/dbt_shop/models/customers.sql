{{ config(materialized='view', alias='customers') }}
select * from {{ source('shop', 'customers') }}
