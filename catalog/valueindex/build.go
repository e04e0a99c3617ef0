package valueindex

import (
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

type txBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
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
)

// Build reads the distinct values of the text-like columns among cols and
// indexes them. All reads run in one READ ONLY transaction with SET LOCAL
// statement_timeout; each column runs under a savepoint, so a column that
// fails (timeout, permission) is recorded in Stats and skipped. Rows are
// streamed straight into the value arena, so memory is bounded by the
// per-column cap, not the table size.
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
		if !c.IsEnum && textLike(c.Type) {
			needTx = true
			break
		}
	}
	if needTx {
		switch qq := q.(type) {
		case txBeginner:
			tx, err = qq.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
		case beginner:
			tx, err = qq.Begin(ctx)
		default:
			return nil, ErrNoTransaction
		}
		if err != nil {
			return nil, fmt.Errorf("valueindex: begin: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		ms := strconv.FormatInt(opts.StatementTimeout.Milliseconds(), 10)
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = "+ms); err != nil {
			return nil, fmt.Errorf("valueindex: set statement_timeout: %w", err)
		}
	}

	for _, c := range cols {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if reason := skipReason(c, sens, names); reason != "" {
			b.skip(c.Schema, c.Table, c.Name, reason)
			continue
		}
		b.startColumn(c.Schema, c.Table, c.Name)
		if c.IsEnum {
			for _, l := range c.EnumLabels[:min(len(c.EnumLabels), opts.MaxValuesPerColumn)] {
				b.add([]byte(l))
			}
			continue
		}
		if err := readColumn(ctx, tx, b, c, opts); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			reason := err.Error()
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == pg.CodeQueryCanceled {
				reason = SkipTimeout
			}
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
		b.aliases = append(b.aliases, b.mineRowAliases(ctx, tx)...)
	}
	return b.finish(), nil
}

func skipReason(c Column, sens, names []*regexp.Regexp) string {
	if !c.IsEnum && !textLike(c.Type) {
		return SkipType
	}
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

// textLike reports whether a format_type() spelling is a scalar string type.
func textLike(t string) bool {
	t = strings.ToLower(strings.TrimSpace(t))
	if strings.HasSuffix(t, "[]") {
		return false
	}
	if i := strings.IndexByte(t, '('); i >= 0 {
		t = strings.TrimSpace(t[:i])
	}
	if i := strings.LastIndexByte(t, '.'); i >= 0 { // schema-qualified citext
		t = t[i+1:]
	}
	switch t {
	case "text", "character varying", "varchar", "character", "char", "bpchar", "citext", "name", `"char"`:
		return true
	}
	return false
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

func columnQuery(c Column, opts Options, sample bool) string {
	from := quoteIdent(c.Schema) + "." + quoteIdent(c.Table)
	if c.Schema == "" {
		from = quoteIdent(c.Table)
	}
	if sample {
		pct := 100 * float64(opts.SampleRows) / float64(c.RowEstimate)
		pct = min(100, max(pct, 0.0001))
		from += " TABLESAMPLE SYSTEM (" + strconv.FormatFloat(pct, 'f', 4, 64) + ") REPEATABLE (0)"
	}
	col := quoteIdent(c.Name)
	// Most frequent values first: the cap keeps the ones people ask about.
	return "SELECT v FROM (SELECT " + col + "::text AS v FROM " + from + " WHERE " + col + " IS NOT NULL) s" +
		" WHERE length(v) <= $1 GROUP BY v ORDER BY count(*) DESC, v LIMIT $2"
}

// readColumn streams one column's values into b under a savepoint.
func readColumn(ctx context.Context, tx pgx.Tx, b *builder, c Column, opts Options) error {
	sample := c.RowEstimate > opts.SampleThreshold
	err := readColumnOnce(ctx, tx, b, c, opts, sample)
	var pe *pgconn.PgError
	if sample && errors.As(err, &pe) && (pe.Code == pg.CodeFeatureNotSupported || pe.Code == pg.CodeWrongObjectType) {
		// TABLESAMPLE on a view: read it whole (the timeout still bounds it).
		b.resetColumn()
		sample = false
		err = readColumnOnce(ctx, tx, b, c, opts, false)
	}
	if err != nil {
		return err
	}
	st := &b.cols[len(b.cols)-1].Stat
	st.Sampled = sample
	st.Truncated = st.Values >= opts.MaxValuesPerColumn
	return nil
}

func readColumnOnce(ctx context.Context, tx pgx.Tx, b *builder, c Column, opts Options, sample bool) (err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	defer func() {
		if err != nil {
			_ = sp.Rollback(context.WithoutCancel(ctx))
		} else if cerr := sp.Commit(ctx); cerr != nil {
			err = cerr
		}
	}()
	rows, err := sp.Query(ctx, columnQuery(c, opts, sample), opts.MaxValueLen, opts.MaxValuesPerColumn)
	if err != nil {
		return err
	}
	defer rows.Close()
	var probe contentProbe
	checked := false
	for rows.Next() {
		v := rows.RawValues()[0]
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

func (b *builder) resetColumn() {
	c := &b.cols[len(b.cols)-1]
	b.rawOff = b.rawOff[:c.Start+1]
	b.raw = b.raw[:b.rawOff[c.Start]]
	c.End = c.Start
	c.Stat.Values = 0
}

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
