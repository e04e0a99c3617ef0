\set VERBOSITY verbose
\set ON_ERROR_STOP 0
CREATE TEMP TABLE copy_t(id int, name text);
\copy copy_t from '@COPY_IN@' with (format csv)
SELECT 'copied', count(*), sum(id), string_agg(name, ',' ORDER BY id) FROM copy_t;
\copy (SELECT id, upper(name) FROM copy_t ORDER BY id) to '@COPY_OUT@' with (format csv)
/* ask: how many rows are in copy_t */ SELECT 1;
SELECT 'after-comment-marker';
ASK how many rows are in copy_t;
SELECT 'after-ask', count(*) FROM copy_t;
