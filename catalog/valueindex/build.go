package valueindex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/ownconn"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// Column is one column as the catalog sees it.
type Column struct {
	Schema, Table, Name string
	Type                string // format_type() spelling: "text", "character varying(40)", …
	IsEnum              bool
	EnumLabels          []string
	RowEstimate         int64 // pg_class.reltuples of the table
	Comment             string
}

// Querier runs a query. Build additionally needs Begin (to read inside one
// READ ONLY transaction with a statement timeout): *pgx.Conn, *pgxpool.Pool
// and pgx.Tx all provide both.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrNoTransaction is returned by Build when the Querier cannot begin a
// transaction.
var ErrNoTransaction = errors.New("valueindex: querier cannot begin a transaction")

// Options configure Build. Zero values take the defaults.
type Options struct {
	MaxValuesPerColumn int // distinct values kept per column, most frequent first (default 10000)
	MaxValueLen        int // longer values are not indexed (default 100 characters)
	// SensitivePatterns are case-insensitive regexps on the column name; a
	// match skips the column. Default: DefaultSensitivePatterns.
	SensitivePatterns []string
	// SkipNamePatterns are case-insensitive regexps on the snake_cased column
	// name for identifier/url/email/phone-like columns. Default:
	// DefaultSkipNamePatterns.
	SkipNamePatterns []string
	// ContentSample is how many of a column's most frequent values are
	// checked for id/url/email/phone-like content (default 200); the column is
	// skipped when at least ContentSkipRatio of them are (default 0.5).
	ContentSample    int
	ContentSkipRatio float64
	// Tables with RowEstimate above SampleThreshold (default 1,000,000) are read
	// with TABLESAMPLE SYSTEM sized for about SampleRows rows (default 500,000).
	SampleThreshold  int64
	SampleRows       int64
	StatementTimeout time.Duration // per statement (default 30s)
	// LSH shape (defaults 32 bands × 4 rows = 128 hashes).
	Bands, Rows int
	// Initials ("LA" ↔ "Los Angeles") are indexed for columns with at most
	// this many values (default 20000): abbreviations name places and
	// departments, not the millions of rows of a people table.
	AbbrevMaxColumnValues int
	// Owners, when set, are the roles whose relations are read; relations
	// of other owners are skipped (SkipOwner). Empty: every relation the
	// catalog role may read.
	Owners []string
	// Aliases are code↔name pairs given by the operator (or a test); Build
	// adds those the data shows (see Alias) unless NoAliases is set.
	Aliases   []Alias
	NoAliases bool
	Logger    *zap.Logger
}

// DefaultSensitivePatterns match columns whose values must never reach a prompt.
func DefaultSensitivePatterns() []string {
	return []string{
		`pass(word|wd)?`, `pwd`, `secret`, `token`, `ssn`, `social_?sec`, `card`, `cvv`, `cvc`,
		`iban`, `api_?key`, `private_?key`, `salt`, `credential`, `(^|_)pin($|_)`, `tax_?id`,
		`passport`, `licen[cs]e_?(no|num)`, `account_?(no|num)`, `routing`, `swift`, `bic$`,
	}
}

// DefaultSkipNamePatterns match identifier-, url-, email- and phone-like columns.
func DefaultSkipNamePatterns() []string {
	return []string{
		`(^|_)(id|ids|uuid|guid|pk|fk|oid)$`, `^(id|uuid|guid)_`, `url|uri$|href|link|website|homepage`,
		`(^|_)e_?mail`, `phone|fax|mobile|msisdn|(^|_)tel$`, `hash|checksum|digest|fingerprint`,
		`(^|_)ip(_?addr(ess)?)?$`, `mac_?addr`, `user_?agent`, `(^|_)(path|file_?name)$`,
	}
}

var commentSensitive = regexp.MustCompile(`(?i)\b(pii|sensitive|confidential|secret)\b`)

func (o Options) config() config {
	c := defaultConfig()
	if o.Bands > 0 {
		c.Bands = o.Bands
	}
	if o.Rows > 0 {
		c.Rows = o.Rows
	}
	if o.AbbrevMaxColumnValues > 0 {
		c.AbbrevMaxColValues = o.AbbrevMaxColumnValues
	}
	return c
}

func (o Options) withDefaults() Options {
	if o.MaxValuesPerColumn <= 0 {
		o.MaxValuesPerColumn = 10000
	}
	if o.MaxValueLen <= 0 {
		o.MaxValueLen = 100
	}
	if o.SensitivePatterns == nil {
		o.SensitivePatterns = DefaultSensitivePatterns()
	}
	if o.SkipNamePatterns == nil {
		o.SkipNamePatterns = DefaultSkipNamePatterns()
	}
	if o.ContentSample <= 0 {
		o.ContentSample = 200
	}
	if o.ContentSkipRatio <= 0 {
		o.ContentSkipRatio = 0.5
	}
	if o.SampleThreshold <= 0 {
		o.SampleThreshold = 1_000_000
	}
	if o.SampleRows <= 0 {
		o.SampleRows = 500_000
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

func compileAll(pats []string) ([]*regexp.Regexp, error) {
	out := make([]*regexp.Regexp, 0, len(pats))
	for _, p := range pats {
		re, err := regexp.Compile("(?i)" + p)
		if err != nil {
			return nil, fmt.Errorf("valueindex: pattern %q: %w", p, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// Skip reasons recorded in ColumnStat.Skipped.
const (
	SkipType      = "not a text-like type"
	SkipSensitive = "sensitive"
	SkipNameLike  = "identifier/url/email/phone-like name"
	SkipContent   = "identifier/url/email/phone-like content"
	SkipTimeout   = "statement timeout"
	// SkipUserCode: reading the relation as the catalog role could run
	// code a user wrote (a view, a row-level security policy calling a
	// function that is not built in, a foreign table or partition); or
	// its owner is not among Options.Owners.
	SkipUserCode = "reading it could run user code"
	SkipOwner    = "owner not indexed"
)

// Build reads the distinct values of the text-like columns among cols and
// indexes them. All reads run in one READ ONLY transaction pinned by
// ownconn (search_path, statement and lock timeouts); each table is locked
// and checked by OID before it is read, and each column runs under a
// savepoint, so a column that fails (timeout, permission) is recorded in
// Stats and skipped. Rows are streamed straight into the value arena, so
// memory is bounded by the per-column cap, not the table size.
//
// What is read is decided by the server's catalog at read time, not by
// cols' type names: a column is read when its type, or the base type of its
// domain, is a built-in string type (text, varchar, bpchar, name) or a
// string type of an extension a superuser owns (citext), and it is read in
// its own type, with no cast, so only built-in (or such an extension's)
// output functions run. A relation whose reading could run anything a user
// wrote is skipped and logged (see checkRelation).
func Build(ctx context.Context, q Querier, cols []Column, opts Options) (*Index, error) {
	opts = opts.withDefaults()
	sens, err := compileAll(opts.SensitivePatterns)
	if err != nil {
		return nil, err
	}
	names, err := compileAll(opts.SkipNamePatterns)
	if err != nil {
		return nil, err
	}
	b := newBuilder(opts.config())
	b.aliases = opts.Aliases

	var tx pgx.Tx
	needTx := false
	for _, c := range cols {
		if !c.IsEnum {
			needTx = true
			break
		}
	}
	if needTx {
		bounds := ownconn.Bounds{Statement: opts.StatementTimeout}
		switch qq := q.(type) {
		case ownconn.Beginner:
			tx, err = ownconn.BeginRead(ctx, qq, "", bounds)
		case beginner:
			tx, err = qq.Begin(ctx)
			if err == nil {
				if _, err = tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err == nil {
					_, err = tx.Exec(ctx, ownconn.PinLocal(bounds))
				}
				if err != nil {
					_ = tx.Rollback(context.WithoutCancel(ctx))
				}
			}
		default:
			return nil, ErrNoTransaction
		}
		if err != nil {
			return nil, fmt.Errorf("valueindex: begin: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	}

	checked := map[tableKey]*relation{}
	for _, c := range cols {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if reason := skipReason(c, sens, names); reason != "" {
			b.skip(c.Schema, c.Table, c.Name, reason)
			continue
		}
		if c.IsEnum {
			b.startColumn(c.Schema, c.Table, c.Name)
			for _, l := range c.EnumLabels[:min(len(c.EnumLabels), opts.MaxValuesPerColumn)] {
				b.add([]byte(l))
			}
			continue
		}
		k := tableKey{c.Schema, c.Table}
		rel, ok := checked[k]
		if !ok {
			rel, err = checkRelation(ctx, tx, c.Schema, c.Table, opts)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				rel = &relation{reason: failReason(err)}
			}
			checked[k] = rel
			if rel.reason != "" {
				opts.Logger.Warn("value index: relation skipped", zap.String("table", c.Schema+"."+c.Table),
					zap.String("reason", rel.reason))
			}
		}
		if rel.reason != "" {
			reason := rel.reason
			if rel.userCode {
				reason = SkipUserCode + ": " + rel.reason
			}
			b.skip(c.Schema, c.Table, c.Name, reason)
			continue
		}
		col, ok := rel.columns[c.Name]
		if !ok || !col.readable {
			b.skip(c.Schema, c.Table, c.Name, SkipType)
			continue
		}
		b.startColumn(c.Schema, c.Table, c.Name)
		if err := readColumn(ctx, tx, b, c, rel, col, opts); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			reason := failReason(err)
			opts.Logger.Warn("value index: column skipped", zap.String("table", c.Schema+"."+c.Table),
				zap.String("column", c.Name), zap.Error(err))
			b.dropColumn(reason)
		}
	}
	for _, c := range cols {
		if c.Comment != "" && skipReason(c, sens, names) == "" {
			b.aliases = append(b.aliases, commentAliases(c.Name, c.Comment)...)
		}
	}
	if tx != nil && !opts.NoAliases {
		b.readable = map[tableKey]*relation{}
		for k, r := range checked {
			if r.reason == "" {
				b.readable[k] = r
			}
		}
		b.aliases = append(b.aliases, b.mineRowAliases(ctx, tx)...)
	}
	return b.finish(), nil
}

// failReason is the skip reason of a failed read: SkipTimeout for a
// statement or lock timeout, else the error.
func failReason(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == pg.CodeQueryCanceled || pe.Code == pg.CodeLockNotAvailable) {
		return SkipTimeout
	}
	return err.Error()
}

func skipReason(c Column, sens, names []*regexp.Regexp) string {
	for _, re := range sens {
		if re.MatchString(c.Name) {
			return SkipSensitive
		}
	}
	if commentSensitive.MatchString(c.Comment) {
		return SkipSensitive
	}
	if c.IsEnum {
		return ""
	}
	sn := snake(c.Name)
	for _, re := range names {
		if re.MatchString(sn) {
			return SkipNameLike
		}
	}
	return ""
}

type tableKey struct{ schema, table string }

// relation is what checkRelation found of one table: why it is not read
// (reason, "" when it is), and how each column is read.
type relation struct {
	oid      uint32
	kind     string // pg_class.relkind
	reason   string
	userCode bool // reason is that reading could run a user's code
	columns  map[string]relColumn
}

type relColumn struct {
	readable bool
	bpchar   bool // blank-padded: trailing blanks are trimmed, as a ::text cast would
}

// Built-in string types, by OID (pg_type.h): text, varchar, bpchar, name.
const (
	oidText    = 25
	oidVarchar = 1043
	oidBpchar  = 1042
	oidName    = 19
)

// relationSQL checks, after the relation is locked (so its kind, policies
// and columns cannot change before the transaction ends), whether reading
// it as this role could run code a user wrote:
//   - views (their definitions) and foreign tables (a server's wrapper) are
//     never read; a partitioned table is not read when a partition is
//     foreign;
//   - a table with row-level security is not read when a policy's
//     expressions depend on anything but the table itself and trusted
//     objects (ownconn.TrustedObject), or call a built-in that runs SQL text
//     or changes settings (query_to_xml and kin, ts_stat, ts_rewrite,
//     set_config): policies run as the reading role;
//   - with owners given, a relation owned by another role is not read.
//
// $1 is the relation's qualified, quoted name; $2 the owner roles (empty: any).
var relationSQL = `
SELECT c.oid, c.relkind::text,
  CASE
    WHEN c.relkind NOT IN ('r', 'p', 'm') THEN 'a view or foreign table (relkind ' || c.relkind::text || ')'
    WHEN c.relkind = 'p' AND EXISTS (
      SELECT 1 FROM pg_catalog.pg_partition_tree(c.oid) pt JOIN pg_catalog.pg_class pc ON pc.oid = pt.relid
      WHERE pc.relkind NOT IN ('r', 'p')) THEN 'a partition is a foreign table'
    WHEN c.relrowsecurity AND EXISTS (
      SELECT 1 FROM pg_catalog.pg_policy pol
      JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_policy'::pg_catalog.regclass AND d.objid = pol.oid
      LEFT JOIN pg_catalog.pg_proc p ON d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = d.refobjid
      WHERE pol.polrelid = c.oid
        AND NOT (d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.refobjid = c.oid)
        AND (NOT ` + ownconn.TrustedObject("d.refclassid", "d.refobjid") + `
             OR p.proname::text LIKE '%to\_xml%' OR p.proname::text IN ('ts_stat', 'ts_rewrite', 'set_config')))
      THEN 'a row-level security policy calls code that is not built in'
    ELSE '' END,
  cardinality($2::pg_catalog.text[]) > 0 AND NOT pg_catalog.pg_get_userbyid(c.relowner)::pg_catalog.text = ANY ($2::pg_catalog.text[])
FROM pg_catalog.pg_class c
WHERE c.oid = pg_catalog.to_regclass($1)`

// columnTypesSQL lists a relation's columns with the base type of each (a
// domain's, followed through domains over domains) and whether that type is
// one the value index reads. Virtual generated columns (PostgreSQL 18)
// compute an expression on every read, so they are never read.
var columnTypesSQL = `
WITH RECURSIVE base(attname, attgenerated, typ, depth) AS (
  SELECT a.attname::pg_catalog.text, a.attgenerated::pg_catalog.text, a.atttypid, 0
  FROM pg_catalog.pg_attribute a
  WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT b.attname, b.attgenerated, t.typbasetype, b.depth + 1
  FROM base b JOIN pg_catalog.pg_type t ON t.oid = b.typ
  WHERE t.typtype = 'd' AND b.depth < 32
)
SELECT b.attname, b.typ::pg_catalog.int8,
  b.attgenerated NOT IN ('v') AND (b.typ IN (25, 1043, 1042, 19)
    OR (t.typcategory = 'S' AND t.typtype = 'b' AND ` + ownconn.TrustedObject("'pg_catalog.pg_type'::pg_catalog.regclass", "t.oid") + `))
FROM base b JOIN pg_catalog.pg_type t ON t.oid = b.typ
WHERE t.typtype <> 'd'`

// checkRelation locks schema.table (ACCESS SHARE, what the read takes
// anyway; it runs no code and holds off DDL that would change what is
// checked) and checks it by OID (relationSQL, columnTypesSQL), under a
// savepoint so a failure only skips the table.
func checkRelation(ctx context.Context, tx pgx.Tx, schema, table string, opts Options) (rel *relation, err error) {
	sp, end, err := savepoint(ctx, tx)
	if err != nil {
		return nil, err
	}
	defer end(&err)
	name := qualified(schema, table)
	if _, err := sp.Exec(ctx, "LOCK TABLE "+name+" IN ACCESS SHARE MODE"); err != nil {
		return nil, err
	}
	owners := opts.Owners
	if owners == nil {
		owners = []string{}
	}
	rel = &relation{columns: map[string]relColumn{}}
	var notOwner bool
	if err := sp.QueryRow(ctx, relationSQL, name, owners).Scan(&rel.oid, &rel.kind, &rel.reason, &notOwner); err != nil {
		return nil, err
	}
	if rel.reason != "" {
		rel.userCode = true
		return rel, nil
	}
	if notOwner {
		rel.reason = SkipOwner
		return rel, nil
	}
	rows, err := sp.Query(ctx, columnTypesSQL, rel.oid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			col string
			typ int64
			ok  bool
		)
		if err := rows.Scan(&col, &typ, &ok); err != nil {
			return nil, err
		}
		rel.columns[col] = relColumn{readable: ok, bpchar: typ == oidBpchar}
	}
	return rel, rows.Err()
}

func qualified(schema, table string) string {
	return quoteIdent(schema) + "." + quoteIdent(table)
}

// from is the FROM item reading rel: ONLY for a plain table, so that no
// inheritance child (whose kind was not checked) is read.
func (rel *relation) from(schema, table string) string {
	if rel.kind == "r" {
		return "ONLY " + qualified(schema, table)
	}
	return qualified(schema, table)
}

// snake turns camelCase into snake_case so name patterns see word boundaries
// ("customerId" → "customer_id").
func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1]))) {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func columnQuery(c Column, rel *relation, opts Options, sample bool) string {
	from := rel.from(c.Schema, c.Table)
	if sample {
		pct := 100 * float64(opts.SampleRows) / float64(c.RowEstimate)
		pct = min(100, max(pct, 0.0001))
		from += " TABLESAMPLE SYSTEM (" + strconv.FormatFloat(pct, 'f', 4, 64) + ") REPEATABLE (0)"
	}
	col := quoteIdent(c.Name)
	// The column is read in its own type: no cast, so no cast function.
	// Most frequent values first: the cap keeps the ones people ask about.
	return "SELECT v FROM (SELECT " + col + " AS v FROM " + from + " WHERE " + col + " IS NOT NULL) s" +
		" WHERE pg_catalog.length(v) <= $1 GROUP BY v ORDER BY pg_catalog.count(*) DESC, v LIMIT $2"
}

// readColumn streams one column's values into b under a savepoint.
func readColumn(ctx context.Context, tx pgx.Tx, b *builder, c Column, rel *relation, col relColumn, opts Options) error {
	sample := c.RowEstimate > opts.SampleThreshold
	if err := readColumnOnce(ctx, tx, b, c, rel, col, opts, sample); err != nil {
		return err
	}
	st := &b.cols[len(b.cols)-1].Stat
	st.Sampled = sample
	st.Truncated = st.Values >= opts.MaxValuesPerColumn
	return nil
}

func readColumnOnce(ctx context.Context, tx pgx.Tx, b *builder, c Column, rel *relation, col relColumn, opts Options, sample bool) (err error) {
	sp, end, err := savepoint(ctx, tx)
	if err != nil {
		return err
	}
	defer end(&err)
	rows, err := sp.Query(ctx, columnQuery(c, rel, opts, sample), opts.MaxValueLen, opts.MaxValuesPerColumn)
	if err != nil {
		return err
	}
	defer rows.Close()
	var probe contentProbe
	checked := false
	for rows.Next() {
		v := rows.RawValues()[0]
		if col.bpchar {
			v = bytes.TrimRight(v, " ")
		}
		b.add(v)
		if !checked {
			probe.observe(v)
			if probe.n >= opts.ContentSample {
				checked = true
				if probe.idLike(opts.ContentSkipRatio) {
					rows.Close()
					return errContentLike
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if !checked && probe.idLike(opts.ContentSkipRatio) {
		return errContentLike
	}
	return nil
}

var errContentLike = errors.New(SkipContent)

var (
	reEmail = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$`)
	reURL   = regexp.MustCompile(`(?i)^([a-z][a-z0-9+.-]*://|www\.)`)
	rePhone = regexp.MustCompile(`^\+?[0-9][0-9 ()./-]{6,}$`)
	reUUID  = regexp.MustCompile(`(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$`)
	reHex   = regexp.MustCompile(`(?i)^(0x)?[0-9a-f]{16,}$`)
	reIP    = regexp.MustCompile(`^\d{1,3}(\.\d{1,3}){3}$`)
)

// contentProbe counts values that look like identifiers rather than words.
type contentProbe struct{ n, like int }

func (p *contentProbe) observe(v []byte) {
	p.n++
	s := string(v)
	digits := 0
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			digits++
		}
	}
	switch {
	case reEmail.MatchString(s), reURL.MatchString(s), reUUID.MatchString(s), reHex.MatchString(s), reIP.MatchString(s):
		p.like++
	case rePhone.MatchString(s) && digits >= 7:
		p.like++
	}
}

func (p *contentProbe) idLike(ratio float64) bool {
	return p.n > 0 && float64(p.like) >= ratio*float64(p.n)
}

// savepoint opens a savepoint of tx; end releases it, or rolls it back when
// *err is set, so that a failure skips one table or column, not the build.
func savepoint(ctx context.Context, tx pgx.Tx) (sp pgx.Tx, end func(*error), err error) {
	sp, err = tx.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("savepoint: %w", err)
	}
	return sp, func(err *error) {
		if *err != nil {
			_ = sp.Rollback(context.WithoutCancel(ctx))
		} else if cerr := sp.Commit(ctx); cerr != nil {
			*err = cerr
		}
	}, nil
}
