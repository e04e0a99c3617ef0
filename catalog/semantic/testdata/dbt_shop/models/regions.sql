{{ config(materialized='view', alias='regions') }}
select * from {{ source('shop', 'regions') }}
