package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"gopkg.in/yaml.v3"
)

// example is one operator question→SQL pair from the --examples file.
type example struct {
	Database string `yaml:"database"`
	Question string `yaml:"question"`
	SQL      string `yaml:"sql"`
}

// loadExamples reads the --examples file: a YAML list of
// {database, question, sql}. Shape errors fail at start; whether the SQL
// passes the guard is checked against each database's catalog later.
func loadExamples(path string) ([]example, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("examples: %w", err)
	}
	var out []example
	if err := yaml.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("examples %s: %w", path, err)
	}
	for i, ex := range out {
		if strings.TrimSpace(ex.Database) == "" || strings.TrimSpace(ex.Question) == "" || strings.TrimSpace(ex.SQL) == "" {
			return nil, fmt.Errorf("examples %s: item %d needs database, question and sql", path, i+1)
		}
	}
	return out, nil
}

// addExamples gives the engine the operator's pairs; each is checked by the
// guard with its database's catalog, and one that fails is logged and
// skipped (plain SQL and other pairs work anyway).
func (p *engineParts) addExamples(ctx context.Context, logger *zap.Logger) {
	for _, ex := range p.examples {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := p.engine.AddPair(cctx, ex.Database, ex.Question, ex.SQL)
		cancel()
		if err != nil {
			logger.Warn("example skipped", zap.String("database", ex.Database), zap.String("question", ex.Question), zap.Error(err))
		}
	}
	if len(p.examples) > 0 {
		logger.Info("examples loaded", zap.Int("count", len(p.examples)))
	}
}
