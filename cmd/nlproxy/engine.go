package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/semantic"
	"github.com/nlproxy/nlproxy/catalog/store"
	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/internal/metrics"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/router"
)

// engineParts is the engine and what must be closed with it.
type engineParts struct {
	translator proxy.Translator
	maxAsks    int
	maxPer     int
	catalogs   *catalog.Manager
	llm        *llm.Pool
	llmConfig  llm.Config
	engine     *engine.Engine
	store      *store.Store // shared catalog store, when configured
	examples   []example
}

func (p *engineParts) Close() error {
	if p == nil || p.catalogs == nil {
		return nil
	}
	err := p.catalogs.Close()
	if p.store != nil {
		p.store.Close()
	}
	return err
}

// useStore shares the catalog snapshots, the translation cache and the
// remembered pairs with the other replicas through the store at dsn.
func (p *engineParts) useStore(ctx context.Context, dsn string, poll time.Duration, embedModel string, logger *zap.Logger) error {
	opts := store.Options{Logger: logger}
	if embedModel != "" {
		opts.Embedder = llm.NewEmbedder(p.llm, embedModel)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, dsn, opts)
	if err != nil {
		return err
	}
	p.store = s
	p.catalogs.Store, p.catalogs.StorePoll = s, poll
	p.engine.Pairs = s
	// Verified queries: the file's and the store's, the store's winning
	// by name (catalog/verified.Shared).
	file, _ := p.engine.Verified.(verified.List)
	p.engine.Verified = verified.Shared{File: file, Store: s}
	if p.engine.Cache != nil {
		p.engine.Cache.Backend = s
	}
	logger.Info("catalog store in use", zap.Bool("pgvector", s.Vector()))
	return nil
}

// buildEngine wires the Ollama client, the catalog manager and the engine.
// It does not contact Ollama or Postgres; checkModels does the former.
func buildEngine(cfg Config, logger *zap.Logger) (*engineParts, error) {
	ec := cfg.Engine
	small := ec.SmallModel
	if small == "" {
		small = ec.Model
	}
	key := ec.LLMAPIKey
	if ec.LLMAPIKeyFile != "" {
		b, err := os.ReadFile(ec.LLMAPIKeyFile)
		if err != nil {
			return nil, fmt.Errorf("llm-api-key-file: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	lcfg := llm.Config{
		API:         strings.ToLower(ec.LLMAPI),
		APIKey:      key,
		Models:      map[llm.Role]string{llm.RoleGenerator: ec.Model, llm.RoleSmall: small, llm.RoleEmbedding: ec.EmbedModel},
		NumCtx:      ec.NumCtx,
		CallTimeout: time.Duration(ec.CallTimeout),
		Logger:      logger.Named("llm"),
	}
	// Several servers (comma-separated): the pool spreads the calls.
	client, err := llm.NewPool(lcfg, splitList(ec.OllamaHost), nil)
	if err != nil {
		return nil, fmt.Errorf("ollama client: %w", err)
	}
	lcfg = client.Config()
	connect, err := catalogConnector(cfg)
	if err != nil {
		return nil, err
	}
	mgr := &catalog.Manager{
		DataDir:         ec.DataDir,
		Connect:         connect,
		Logger:          logger.Named("catalog"),
		RefreshInterval: time.Duration(ec.RefreshEvery),
		MinRefreshGap:   time.Duration(ec.RefreshGap),
	}
	if mgr.MinRefreshGap == 0 { // the option's 0 is "no minimum", the Manager's -1
		mgr.MinRefreshGap = -1
	}
	mgr.IntrospectOptions.Schemas = ec.Schemas // empty: every schema the catalog role may use
	mgr.ValueOptions.Owners = ec.ValueOwners   // empty: every owner
	if ec.EmbedModel != "" {
		emb := llm.NewEmbedder(client, ec.EmbedModel)
		mgr.DescOptions = descindex.Options{Embedder: emb}
	}
	if ec.Glossary != "" {
		docs, err := descindex.LoadGlossary(ec.Glossary)
		if err != nil {
			return nil, fmt.Errorf("glossary: %w", err)
		}
		mgr.Glossary = docs
	}
	modelData, err := engine.ParseModelData(ec.ModelData)
	if err != nil {
		return nil, fmt.Errorf("--model-data: %w", err)
	}
	var semanticJoins []semantic.Join
	for _, f := range ec.SemanticModels {
		l, err := semantic.Read(f)
		if err != nil {
			return nil, err
		}
		for _, d := range l.Dropped {
			logger.Warn("semantic model: not imported", zap.String("file", f), zap.String("what", d))
		}
		mgr.Glossary = append(mgr.Glossary, l.Docs()...)
		semanticJoins = append(semanticJoins, l.Joins()...)
	}
	eng := &engine.Engine{
		LLM:                 client,
		Catalogs:            mgr,
		Cache:               engine.NewCache(ec.CacheSize, time.Duration(ec.CacheTTL)),
		Logger:              logger.Named("engine"),
		AskTimeout:          time.Duration(ec.AskTimeout),
		TrialTimeout:        time.Duration(ec.TrialTimeout),
		TrialMaxBytes:       ec.TrialMaxBytes,
		NoLiteralCorrection: ec.NoLiteralCorrection,
		ModelData:           modelData,
		SemanticJoins:       semanticJoins,
		NumCtx:              ec.NumCtx,
		Guard:               guard.Options{AllowFunctions: ec.AllowFunctions, DenyFunctions: ec.DenyFunctions},
		Redact:              cfg.Ops.redaction(),

		DefaultProfile:   ec.Profile,
		DatabaseProfiles: ec.DatabaseProfiles,
		Parallel:         ec.Parallel,
		OutputCaps:       ec.OutputCaps,
	}
	if ec.EmbedModel != "" {
		// Remembered pairs are then ranked by meaning (a catalog store,
		// when configured, takes their place with its own embeddings).
		eng.Pairs = &engine.MemoryPairs{Embedder: llm.NewEmbedder(client, ec.EmbedModel)}
	}
	if ec.Verified != "" {
		es, err := verified.Read(ec.Verified)
		if err != nil {
			return nil, err
		}
		eng.Verified = verified.List(es)
	}
	// The max profile's last stage, as configured.
	stage := ec.Optimize.optimizer()
	stage.MinCost = ec.Optimize.MinCost
	eng.Profiles = engine.Profiles()
	eng.Profiles[engine.ProfileMax].Optimizer = engine.GuidedCostDescent(stage)
	// A malformed pattern would silently allow or deny everything.
	if _, err := guard.Check("SELECT 1", eng.Guard); err != nil {
		return nil, fmt.Errorf("function patterns: %w", err)
	}
	var examples []example
	if ec.Examples != "" {
		if examples, err = loadExamples(ec.Examples); err != nil {
			return nil, err
		}
	}
	multi, err := buildAskAll(cfg, eng, client, mgr, logger)
	if err != nil {
		return nil, err
	}
	// optimize: uses the generator model; the guard options come from the
	// engine per database.
	opt := ec.Optimize.optimizer()
	opt.LLM, opt.NumCtx = client, ec.NumCtx
	return &engineParts{translator: router.Translator{Engine: eng, Multi: multi, StatementTimeout: time.Duration(ec.RunTimeout), Optimizer: opt,
		MaxQuestionBytes: ec.MaxQuestionBytes, NoProgress: ec.NoProgress},
		maxAsks: ec.MaxAsks, maxPer: ec.MaxAsksPerClient, catalogs: mgr, llm: client, llmConfig: lcfg, engine: eng, examples: examples}, nil
}

// attach makes srv answer natural-language statements with the engine and
// refresh the catalog when DDL passes through.
func (p *engineParts) attach(srv *proxy.Server) {
	srv.Translator = p.translator
	srv.MaxAsks, srv.MaxAsksPerClient = p.maxAsks, p.maxPer
	srv.OnDDL = func(database, tag string) { p.catalogs.Refresh(database) }
}

// checkModels logs, at start, whether Ollama answers and has the configured
// models; a missing model is a warning, not a failure: plain SQL still works.
func (p *engineParts) checkModels(ctx context.Context, logger *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Each server of a pool is checked: one without the model would fail
	// the calls sent to it (the pool then skips it for a while).
	for _, c := range p.llm.Members() {
		if err := llm.CheckModels(ctx, c, p.llmConfig); err != nil {
			var le *llm.Error
			hint := ""
			if errors.As(err, &le) {
				hint = le.Hint
			}
			logger.Warn("natural-language questions will fail until the model server is ready",
				zap.String("ollama", c.BaseURL()), zap.Error(err), zap.String("hint", hint))
			continue
		}
		// What each chat model is (its template): said once in the log and
		// on /readyz when the system prompt has to be folded.
		for _, role := range []llm.Role{llm.RoleGenerator, llm.RoleSmall} {
			if m := c.ModelFor(role); m != "" {
				c.Info(ctx, m)
			}
		}
		logger.Info("ollama ready", zap.String("ollama", c.BaseURL()))
	}
}

// observe reports catalog checks and model calls to m (nil: metrics off).
func (p *engineParts) observe(m *metrics.Metrics) {
	if m == nil {
		return
	}
	p.llm.Observe(m)
	p.catalogs.OnCheck = func(database, result string, snap *catalog.Snapshot) {
		tables, version := -1, 0
		if snap != nil {
			tables, version = len(snap.Schema.Tables), snap.Version
		}
		m.CatalogRefresh(database, result, tables, version, time.Now())
	}
}

// ollamaCheck is the readiness check of the model servers: at least one
// answers (the others are skipped until they do).
func (p *engineParts) ollamaCheck(ctx context.Context) error {
	return p.llm.Check(ctx)
}
