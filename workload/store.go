package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// FileExt names a profile's file in the data directory, beside the
// catalog's snapshots (<database>.nlcat).
const FileExt = ".nlwork"

// FormatVersion is the file format; a file of another version is ignored
// (the workload is learnt again).
const FormatVersion = 1

// file is a profile on disk. Forget and ClearAll are requests written by
// `nlproxy workload forget` while a proxy may hold the profile in memory:
// the proxy applies them when it next saves, then writes them away.
type file struct {
	Format   int       `json:"format"`
	Database string    `json:"database"`
	SavedAt  time.Time `json:"saved_at"`
	Queries  []Query   `json:"queries"`
	Forget   []string  `json:"forget,omitempty"`
	ClearAll bool      `json:"clear_all,omitempty"`
}

// Path is the file holding database's profile under dir.
func Path(dir, database string) string {
	return filepath.Join(dir, url.PathEscape(database)+FileExt)
}

// Store keeps the profiles of every database, in memory and, when dir is
// set, in files there. Safe for concurrent use.
type Store struct {
	dir    string
	limits Limits

	mu       sync.Mutex
	profiles map[string]*Profile
	saved    map[string]uint64 // profile version last written
	// saveMu serialises Save, so that two saves do not race on a file.
	saveMu sync.Mutex
}

// NewStore is a store under dir ("" keeps profiles in memory only).
func NewStore(dir string, l Limits) *Store {
	return &Store{dir: dir, limits: l, profiles: map[string]*Profile{}, saved: map[string]uint64{}}
}

// Profile is database's profile, read from its file on first use (a
// missing, unreadable or other-version file starts it empty; the error
// says why, and the profile is usable either way).
func (s *Store) Profile(database string) (*Profile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.profiles[database]; p != nil {
		return p, nil
	}
	p := NewProfile(database, s.limits)
	var err error
	if s.dir != "" {
		var f *file
		f, err = readFile(Path(s.dir, database))
		if f != nil {
			fill(p, f, time.Now())
		}
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	}
	s.profiles[database] = p
	s.saved[database] = p.Version()
	return p, err
}

// Profiles lists the profiles in memory, by database.
func (s *Store) Profiles() []*Profile {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Profile, 0, len(s.profiles))
	for _, p := range s.profiles {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Profile) int { return strings.Compare(a.database, b.database) })
	return out
}

// fill loads f into p, applying its forget requests and the bounds.
func fill(p *Profile, f *file, now time.Time) {
	if f.ClearAll {
		return
	}
	for _, q := range f.Queries {
		if !slices.Contains(f.Forget, q.Fingerprint) {
			p.put(q)
		}
	}
	p.Prune(now)
}

// Save writes every profile that changed since it was last written, and
// applies forget requests found in the files. Without a dir it does nothing.
func (s *Store) Save(now time.Time) error {
	if s.dir == "" {
		return nil
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	var errs []error
	for _, p := range s.Profiles() {
		if err := s.save(p, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Store) save(p *Profile, now time.Time) error {
	path := Path(s.dir, p.database)
	unlock, err := lockFile(path)
	if err != nil {
		return err
	}
	defer unlock()
	// Forget requests written since the last save apply first, so a
	// forgotten fingerprint is not written back.
	if f, err := readFile(path); err == nil {
		if f.ClearAll {
			p.Clear()
		}
		for _, fp := range f.Forget {
			p.Forget(fp)
		}
		if f.ClearAll || len(f.Forget) > 0 {
			s.mu.Lock()
			s.saved[p.database] = ^uint64(0) // rewrite, dropping the requests
			s.mu.Unlock()
		}
	}
	p.Prune(now)
	v := p.Version()
	s.mu.Lock()
	same := s.saved[p.database] == v
	s.mu.Unlock()
	if same {
		return nil
	}
	if err := writeFile(path, &file{Format: FormatVersion, Database: p.database, SavedAt: now.UTC(), Queries: p.Queries()}); err != nil {
		return err
	}
	s.mu.Lock()
	s.saved[p.database] = v
	s.mu.Unlock()
	return nil
}

func readFile(path string) (*file, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("workload: %s: %w", path, err)
	}
	if f.Format != FormatVersion {
		return nil, fmt.Errorf("workload: %s: format %d, want %d", path, f.Format, FormatVersion)
	}
	return &f, nil
}

// writeFile replaces path atomically: a temp file in the same directory,
// fsync, rename, fsync of the directory.
func writeFile(path string, f *file) (err error) {
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return fmt.Errorf("workload: encode: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("workload: data dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("workload: temp file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(b); err != nil {
		return fmt.Errorf("workload: write: %w", err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("workload: sync: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("workload: close: %w", err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("workload: rename: %w", err)
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// Databases lists the databases with a profile file under dir.
func Databases(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	var out []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), FileExt)
		if !ok || e.IsDir() {
			continue
		}
		if db, err := url.PathUnescape(name); err == nil {
			out = append(out, db)
		}
	}
	return out, nil
}

// ReadProfile reads database's profile from its file under dir, with its
// pending forget requests applied.
func ReadProfile(dir, database string, l Limits, now time.Time) (*Profile, error) {
	f, err := readFile(Path(dir, database))
	if err != nil {
		return nil, err
	}
	p := NewProfile(database, l)
	fill(p, f, now)
	return p, nil
}

// ForgetInFile removes one fingerprint ("" for all) from database's file
// under dir, and records the request so that a proxy holding the profile
// drops it too when it next saves. It reports how many fingerprints the
// file lost.
func ForgetInFile(dir, database, fingerprint string) (int, error) {
	path := Path(dir, database)
	unlock, err := lockFile(path)
	if err != nil {
		return 0, err
	}
	defer unlock()
	f, err := readFile(path)
	if err != nil {
		return 0, err
	}
	n := 0
	if fingerprint == "" {
		n = len(f.Queries)
		f.Queries, f.Forget, f.ClearAll = nil, nil, true
	} else {
		f.Queries = slices.DeleteFunc(f.Queries, func(q Query) bool {
			if q.Fingerprint == fingerprint {
				n++
				return true
			}
			return false
		})
		if !slices.Contains(f.Forget, fingerprint) {
			f.Forget = append(f.Forget, fingerprint)
		}
	}
	return n, writeFile(path, f)
}
