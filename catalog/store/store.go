// Package store is the shared catalog store: one Postgres database that
// every nlproxy replica reads, holding each database's catalog snapshot,
// the translation cache and remembered question→SQL pairs. One replica at a
// time refreshes a database's snapshot, under a session advisory lock.
//
// Pair embeddings use pgvector's vector type when the extension can be
// created in the store database, and a plain real[] column otherwise (the
// similarity search then runs in the proxy).
package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/internal/ownconn"
)

// Embedder turns pair questions into vectors (descindex.Embedder).
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Options configure Open.
type Options struct {
	// Schema holds the store's tables (default "nlproxy"); created if missing.
	Schema string
	// Embedder, when set, embeds each pair's question for SimilarPairs.
	Embedder Embedder
	// NoVector keeps embeddings in a plain column even where pgvector exists.
	NoVector bool
	Logger   *zap.Logger
}

// Store is a catalog store in Postgres. Safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	schema string // quoted
	vector bool
	// vecType and vecDist name pgvector's type and cosine distance operator
	// qualified by the extension's schema (set when vector is).
	vecType, vecDist string
	emb              Embedder
	log              *zap.Logger
}

var (
	_ catalog.Store       = (*Store)(nil)
	_ memory.PairStore    = (*Store)(nil)
	_ memory.CacheBackend = (*Store)(nil)
	_ verified.Store      = (*Store)(nil)
)

// Open connects to the store database (a libpq URL or DSN) and creates the
// schema and tables that are missing.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("catalog store: %w", err)
	}
	// The store's connections are the proxy's own: pinned and bounded as
	// internal/ownconn says, writing only the store's schema.
	ownconn.Configure(&cfg.ConnConfig.Config, ownconn.Write, ownconn.Bounds{Statement: time.Minute})
	if cfg.MaxConns < 4 {
		cfg.MaxConns = 4 // refresh locks hold a connection each
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("catalog store: %w", err)
	}
	name := opts.Schema
	if name == "" {
		name = "nlproxy"
	}
	s := &Store{pool: pool, schema: pgx.Identifier{name}.Sanitize(), emb: opts.Embedder, log: opts.Logger}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if err := s.migrate(ctx, !opts.NoVector); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the connections (and so releases any refresh lock).
func (s *Store) Close() { s.pool.Close() }

// Vector reports whether embeddings are stored with pgvector.
func (s *Store) Vector() bool { return s.vector }

func (s *Store) t(name string) string { return s.schema + "." + name }

// migrate creates what is missing. Two replicas starting at once race on
// CREATE … IF NOT EXISTS, so it runs under a transaction-level advisory lock.
func (s *Store) migrate(ctx context.Context, wantVector bool) error {
	if wantVector {
		// Where the extension is installed on the server and we may create
		// it; anywhere else the plain column serves.
		var available bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions WHERE name = 'vector')`).Scan(&available); err != nil {
			return fmt.Errorf("catalog store: %w", err)
		}
		if available {
			// Into the store's own schema when it is created here (an
			// existing installation stays where it is).
			if _, err := s.pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+s.schema+`; CREATE EXTENSION IF NOT EXISTS vector SCHEMA `+s.schema); err != nil {
				s.log.Info("pgvector present but not creatable; embeddings in a plain column", zap.Error(err))
			}
		}
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("catalog store: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.pg_advisory_xact_lock($1)`, lockKey("migrate", "")); err != nil {
		return fmt.Errorf("catalog store: %w", err)
	}
	var vecSchema *string
	if err := tx.QueryRow(ctx, `SELECT (SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_extension e
		JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector')`).Scan(&vecSchema); err != nil {
		return fmt.Errorf("catalog store: %w", err)
	}
	if vecSchema != nil {
		q := pgx.Identifier{*vecSchema}.Sanitize()
		s.vecType, s.vecDist = q+".vector", "OPERATOR("+q+".<=>)"
	}
	embType := "real[]"
	if vecSchema != nil && wantVector {
		embType = s.vecType
	}
	ddl := []string{
		`CREATE SCHEMA IF NOT EXISTS ` + s.schema,
		`CREATE TABLE IF NOT EXISTS ` + s.t("snapshots") + ` (
			database    text PRIMARY KEY,
			version     int NOT NULL,
			fingerprint text NOT NULL,
			built_at    timestamptz NOT NULL,
			saved_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
			data        bytea NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + s.t("translations") + ` (
			key     text PRIMARY KEY,
			sql     text NOT NULL,
			expires timestamptz NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS translations_expires ON ` + s.t("translations") + ` (expires)`,
		// Added after the first release: stores made before it lack it.
		`ALTER TABLE ` + s.t("translations") + ` ADD COLUMN IF NOT EXISTS confidence double precision`,
		`ALTER TABLE ` + s.t("translations") + ` ADD COLUMN IF NOT EXISTS rewrites jsonb`,
		`CREATE TABLE IF NOT EXISTS ` + s.t("pairs") + ` (
			database  text NOT NULL,
			qkey      text NOT NULL,
			question  text NOT NULL,
			sql       text NOT NULL,
			source    text NOT NULL,
			role      text NOT NULL DEFAULT '',
			at        timestamptz NOT NULL,
			embedding ` + embType + `,
			PRIMARY KEY (database, role, qkey))`,
		// Verified queries (catalog/verified), shared by the replicas.
		`CREATE TABLE IF NOT EXISTS ` + s.t("verified") + ` (
			database text NOT NULL,
			name     text NOT NULL,
			entry    jsonb NOT NULL,
			at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
			PRIMARY KEY (database, name))`,
	}
	for _, q := range ddl {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("catalog store: create tables: %w", err)
		}
	}
	// The column's type decides, whatever this replica wanted: a store
	// created with pgvector stays so.
	var colType string
	if err := tx.QueryRow(ctx, `SELECT t.typname::pg_catalog.text FROM pg_catalog.pg_attribute a
		JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = $1::pg_catalog.regclass AND a.attname = 'embedding'`, s.t("pairs")).Scan(&colType); err != nil {
		return fmt.Errorf("catalog store: %w", err)
	}
	s.vector = colType == "vector" && s.vecType != ""
	// The store writes only its own schema, and that schema must be this
	// role's: a schema someone else made first (or tables in it) could
	// carry their triggers, rules or policies into the store's writes.
	var ownSchema, ownTables bool
	if err := tx.QueryRow(ctx, `SELECT n.nspowner = u.oid,
		NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relowner <> u.oid)
		FROM pg_catalog.pg_namespace n, pg_catalog.pg_roles u
		WHERE n.oid = $1::pg_catalog.regnamespace AND u.rolname = CURRENT_USER`, s.schema).Scan(&ownSchema, &ownTables); err != nil {
		return fmt.Errorf("catalog store: %w", err)
	}
	if !ownSchema || !ownTables {
		return fmt.Errorf("catalog store: schema %s (or a relation in it) is not owned by the store's role; the store writes only a schema of its own", s.schema)
	}
	// The store holds data values in clear (docs/deploying.md): say who
	// else may read it.
	rows, err := tx.Query(ctx, `SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee)::pg_catalog.text END
		FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
		WHERE c.relnamespace = $1::pg_catalog.regnamespace AND a.grantee <> c.relowner
		ORDER BY 1`, s.schema)
	if err != nil {
		return fmt.Errorf("catalog store: %w", err)
	}
	others, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("catalog store: %w", err)
	}
	if len(others) > 0 {
		s.log.Warn("catalog store: other roles may read the store, which holds stored values, questions and SQL with literals in clear",
			zap.String("schema", s.schema), zap.Strings("roles", others))
	}
	return tx.Commit(ctx)
}

// lockKey is the advisory lock key for a purpose and database.
func lockKey(purpose, database string) int64 {
	h := fnv.New64a()
	h.Write([]byte("nlproxy\x00" + purpose + "\x00" + database))
	return int64(h.Sum64())
}

// ---- catalog.Store ----

// LoadSnapshot implements catalog.Store.
func (s *Store) LoadSnapshot(ctx context.Context, database string, descOpts descindex.Options) (*catalog.Snapshot, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM `+s.t("snapshots")+` WHERE database = $1`, database).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("catalog store: no snapshot of %s: %w", database, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("catalog store: %w", err)
	}
	return catalog.ReadSnapshot(bytes.NewReader(data), descOpts)
}

// SaveSnapshot implements catalog.Store. An older version never replaces
// a newer one.
func (s *Store) SaveSnapshot(ctx context.Context, snap *catalog.Snapshot) error {
	var buf bytes.Buffer
	if err := catalog.WriteSnapshot(&buf, snap); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.t("snapshots")+` (database, version, fingerprint, built_at, data)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (database) DO UPDATE SET version = EXCLUDED.version, fingerprint = EXCLUDED.fingerprint,
			built_at = EXCLUDED.built_at, data = EXCLUDED.data, saved_at = pg_catalog.now()
		WHERE `+s.t("snapshots")+`.version <= EXCLUDED.version`,
		snap.Database, snap.Version, snap.Schema.Fingerprint, snap.BuiltAt, buf.Bytes())
	if err != nil {
		return fmt.Errorf("catalog store: save snapshot: %w", err)
	}
	return nil
}

// SnapshotVersion implements catalog.Store.
func (s *Store) SnapshotVersion(ctx context.Context, database string) (int, string, bool, error) {
	var v int
	var fp string
	err := s.pool.QueryRow(ctx, `SELECT version, fingerprint FROM `+s.t("snapshots")+` WHERE database = $1`, database).Scan(&v, &fp)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, fmt.Errorf("catalog store: %w", err)
	}
	return v, fp, true, nil
}

// LockRefresh implements catalog.Store with a session advisory lock on a
// connection kept until release; if this process dies, Postgres ends the
// session and frees the lock.
func (s *Store) LockRefresh(ctx context.Context, database string) (func(), bool, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("catalog store: %w", err)
	}
	key := lockKey("refresh", database)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, fmt.Errorf("catalog store: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_advisory_unlock($1)`, key); err != nil {
			// The lock may still be held: do not hand this session back.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, true, nil
}

// ---- memory.CacheBackend ----

// GetEntry implements memory.CacheBackend. A NULL confidence (a
// translation without one) reads as -1, unknown.
func (s *Store) GetEntry(ctx context.Context, key string) (memory.CacheEntry, bool, error) {
	var t memory.CacheEntry
	var conf *float64
	var rewrites []byte
	err := s.pool.QueryRow(ctx, `SELECT sql, confidence, rewrites FROM `+s.t("translations")+` WHERE key = $1 AND expires > pg_catalog.now()`, key).Scan(&t.SQL, &conf, &rewrites)
	if errors.Is(err, pgx.ErrNoRows) {
		return memory.CacheEntry{}, false, nil
	}
	if err != nil {
		return memory.CacheEntry{}, false, fmt.Errorf("catalog store: %w", err)
	}
	t.Confidence = -1
	if conf != nil {
		t.Confidence = *conf
	}
	if rewrites != nil {
		if err := json.Unmarshal(rewrites, &t.Rewrites); err != nil {
			return memory.CacheEntry{}, false, fmt.Errorf("catalog store: translation rewrites: %w", err)
		}
	}
	return t, true, nil
}

// PutEntry implements memory.CacheBackend; expired rows are pruned
// now and then by the writes themselves.
func (s *Store) PutEntry(ctx context.Context, key string, t memory.CacheEntry, expires time.Time) error {
	var conf *float64
	if t.Confidence >= 0 {
		conf = &t.Confidence
	}
	var rewrites []byte // NULL: none
	if len(t.Rewrites) > 0 {
		b, err := json.Marshal(t.Rewrites)
		if err != nil {
			return fmt.Errorf("catalog store: %w", err)
		}
		rewrites = b
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.t("translations")+` (key, sql, confidence, expires, rewrites) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (key) DO UPDATE SET sql = EXCLUDED.sql, confidence = EXCLUDED.confidence, expires = EXCLUDED.expires,
		rewrites = EXCLUDED.rewrites`, key, t.SQL, conf, expires, rewrites)
	if err != nil {
		return fmt.Errorf("catalog store: %w", err)
	}
	if key[0]%16 == 0 { // about one write in 16
		_, _ = s.pool.Exec(ctx, `DELETE FROM `+s.t("translations")+` WHERE expires < pg_catalog.now()`)
	}
	return nil
}

// ---- memory.PairStore ----

// AddPair implements memory.PairStore: a pair with the same normalized
// question replaces the earlier one, except that an accepted pair never
// replaces an operator's.
func (s *Store) AddPair(ctx context.Context, database string, p memory.Pair) error {
	var emb any
	if s.emb != nil {
		vs, err := s.emb.Embed(ctx, []string{p.Question})
		if err != nil {
			s.log.Warn("pair stored without an embedding", zap.Error(err))
		} else if len(vs) == 1 {
			if s.vector {
				emb = pgvector.NewVector(vs[0])
			} else {
				emb = vs[0]
			}
		}
	}
	cast := ""
	if s.vector {
		cast = "::" + s.vecType
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.t("pairs")+` (database, qkey, question, sql, source, at, embedding, role)
		VALUES ($1, $2, $3, $4, $5, $6, $7`+cast+`, $9)
		ON CONFLICT (database, role, qkey) DO UPDATE SET question = EXCLUDED.question, sql = EXCLUDED.sql,
			source = EXCLUDED.source, at = EXCLUDED.at, embedding = EXCLUDED.embedding
		WHERE `+s.t("pairs")+`.source <> $8 OR EXCLUDED.source = $8`,
		database, memory.NormalizeQuestion(p.Question), p.Question, p.SQL, p.Source, p.At, emb, memory.PairOperator, p.Role)
	if err != nil {
		return fmt.Errorf("catalog store: add pair: %w", err)
	}
	return nil
}

// maxPairs bounds what Pairs returns per database (newest first).
const maxPairs = 1000

// Pairs implements memory.PairStore: operator pairs first, then the newest.
func (s *Store) Pairs(ctx context.Context, database string) ([]memory.Pair, error) {
	rows, err := s.pool.Query(ctx, `SELECT question, sql, source, at, role FROM `+s.t("pairs")+`
		WHERE database = $1 ORDER BY source = $2 DESC, at DESC LIMIT $3`, database, memory.PairOperator, maxPairs)
	if err != nil {
		return nil, fmt.Errorf("catalog store: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (memory.Pair, error) {
		var p memory.Pair
		err := r.Scan(&p.Question, &p.SQL, &p.Source, &p.At, &p.Role)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("catalog store: %w", err)
	}
	return out, nil
}

// SimilarPairs returns up to k pairs whose question embeddings are nearest
// (cosine) to question's: in Postgres with pgvector, else here.
func (s *Store) SimilarPairs(ctx context.Context, database, question string, k int) ([]memory.Pair, error) {
	if s.emb == nil {
		return nil, fmt.Errorf("catalog store: %w", memory.ErrNoEmbedder)
	}
	vs, err := s.emb.Embed(ctx, []string{question})
	if err != nil || len(vs) != 1 {
		return nil, fmt.Errorf("catalog store: embed question: %w", err)
	}
	q := vs[0]
	if s.vector {
		rows, err := s.pool.Query(ctx, `SELECT question, sql, source, at, role FROM `+s.t("pairs")+`
			WHERE database = $1 AND embedding IS NOT NULL ORDER BY embedding `+s.vecDist+` $2::`+s.vecType+` LIMIT $3`,
			database, pgvector.NewVector(q), k)
		if err != nil {
			return nil, fmt.Errorf("catalog store: %w", err)
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (memory.Pair, error) {
			var p memory.Pair
			err := r.Scan(&p.Question, &p.SQL, &p.Source, &p.At, &p.Role)
			return p, err
		})
	}
	rows, err := s.pool.Query(ctx, `SELECT question, sql, source, at, role, embedding FROM `+s.t("pairs")+`
		WHERE database = $1 AND embedding IS NOT NULL`, database)
	if err != nil {
		return nil, fmt.Errorf("catalog store: %w", err)
	}
	type scored struct {
		p   memory.Pair
		sim float64
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (scored, error) {
		var sc scored
		var e []float32
		err := r.Scan(&sc.p.Question, &sc.p.SQL, &sc.p.Source, &sc.p.At, &sc.p.Role, &e)
		sc.sim = cosine(q, e)
		return sc, err
	})
	if err != nil {
		return nil, fmt.Errorf("catalog store: %w", err)
	}
	slices.SortStableFunc(all, func(a, b scored) int {
		switch {
		case a.sim > b.sim:
			return -1
		case a.sim < b.sim:
			return 1
		}
		return 0
	})
	out := make([]memory.Pair, 0, k)
	for i := 0; i < len(all) && i < k; i++ {
		out = append(out, all[i].p)
	}
	return out, nil
}

func cosine(a, b []float32) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return math.Inf(-1)
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return math.Inf(-1)
	}
	return dot / math.Sqrt(na*nb)
}

// ---- verified.Store ----

// maxVerified bounds what one read of verified queries returns.
const maxVerified = 10000

// Verified implements verified.Store.
func (s *Store) Verified(ctx context.Context, database string) ([]verified.Entry, error) {
	return s.verified(ctx, `SELECT entry FROM `+s.t("verified")+` WHERE database = $1 ORDER BY name LIMIT $2`, database, maxVerified)
}

// AllVerified implements verified.Store.
func (s *Store) AllVerified(ctx context.Context) ([]verified.Entry, error) {
	return s.verified(ctx, `SELECT entry FROM `+s.t("verified")+` ORDER BY database, name LIMIT $1`, maxVerified)
}

func (s *Store) verified(ctx context.Context, q string, args ...any) ([]verified.Entry, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog store: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (verified.Entry, error) {
		var b []byte
		var e verified.Entry
		if err := r.Scan(&b); err != nil {
			return e, err
		}
		return e, json.Unmarshal(b, &e)
	})
	if err != nil {
		return nil, fmt.Errorf("catalog store: verified queries: %w", err)
	}
	return out, nil
}

// PutVerified implements verified.Store; the entry must pass Check.
func (s *Store) PutVerified(ctx context.Context, e verified.Entry) error {
	if err := e.Check(); err != nil {
		return err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("catalog store: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.t("verified")+` (database, name, entry) VALUES ($1, $2, $3)
		ON CONFLICT (database, name) DO UPDATE SET entry = EXCLUDED.entry, at = pg_catalog.now()`, e.Database, e.Name, b); err != nil {
		return fmt.Errorf("catalog store: add verified query: %w", err)
	}
	return nil
}

// RemoveVerified implements verified.Store.
func (s *Store) RemoveVerified(ctx context.Context, database, name string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.t("verified")+` WHERE database = $1 AND name = $2`, database, name)
	if err != nil {
		return false, fmt.Errorf("catalog store: remove verified query: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}
