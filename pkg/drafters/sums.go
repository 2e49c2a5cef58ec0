package drafters

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
)

// SumsFile is SHA256SUMS, which drafter train writes beside drafter.json
// after every other file of the export: the SHA-256 of each exported file
// (the weights and config of every layout, and drafter.json), in the format
// of sha256sum ("<hex>  <path>" per line, paths relative to its folder, with
// forward slashes), so that `sha256sum -c SHA256SUMS` checks a copy too.
// drafter eval and drafter inspect verify it (VerifySums): one flipped bit of
// a weight would otherwise be evaluated, and shipped, as a working drafter.
const SumsFile = "SHA256SUMS"

// RemoveSums deletes dir's SHA256SUMS, if any. An export calls it before
// it rewrites any file: a run killed half-way through must leave no sums of
// the previous export beside new files (they would read as damage), only an
// export without sums (read with a warning, as an older one).
func RemoveSums(dir string) error {
	err := os.Remove(filepath.Join(dir, SumsFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("drafter: %w", err)
	}
	return nil
}

// WriteSums hashes files (paths relative to dir) and writes dir/SHA256SUMS
// atomically, sorted by path. Call it once every file is written.
func WriteSums(dir string, files []string) error {
	files = slices.Sorted(slices.Values(files))
	var b bytes.Buffer
	for _, f := range files {
		sum, err := fileSHA256(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			return fmt.Errorf("drafter: checksum of the export: %w", err)
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, filepath.ToSlash(f))
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, SumsFile), b.Bytes()); err != nil {
		return fmt.Errorf("drafter: %w", err)
	}
	return nil
}

// Sums is a SHA256SUMS file read back: Path is the file, Files maps each
// listed path (relative to its folder, forward slashes) to its hex SHA-256.
type Sums struct {
	Path  string
	Files map[string]string
}

// FindSums returns the SHA256SUMS of the first of dirs that holds one, nil
// when none does (an export by a drafter from before the sums).
func FindSums(dirs ...string) (*Sums, error) {
	for _, d := range dirs {
		p := filepath.Join(d, SumsFile)
		raw, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("drafter: %w", err)
		}
		return parseSums(p, raw)
	}
	return nil, nil
}

// parseSums reads sha256sum's format (a "*" before the name marks binary
// mode, which is the same for SHA-256).
func parseSums(path string, raw []byte) (*Sums, error) {
	s := &Sums{Path: path, Files: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		name = strings.TrimPrefix(strings.TrimPrefix(name, " "), "*")
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 64 || name == "" {
			return nil, fmt.Errorf("drafter: %s line %d is not \"<sha256>  <file>\": the file is damaged; restore the export from a copy, or train again", path, n)
		}
		s.Files[name] = strings.ToLower(sum)
	}
	return s, nil
}

// Dir returns the folder the sums' paths are relative to.
func (s *Sums) Dir() string { return filepath.Dir(s.Path) }

// Lists reports whether the sums list a file inside dir (or dir itself).
func (s *Sums) Lists(dir string) bool {
	for name := range s.Files {
		if inside(filepath.Join(s.Dir(), filepath.FromSlash(name)), dir) {
			return true
		}
	}
	return false
}

// inside reports whether path is dir or lies below it.
func inside(path, dir string) bool {
	r, err := filepath.Rel(dir, path)
	return err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator))
}

// Check hashes every listed file that exists and compares it with its
// recorded SHA-256; the first that differs is an error naming it. A listed
// file that is absent is skipped here (the other layout of a Medusa export,
// deleted to ship one): Covers requires the files a drafter is loaded from.
// It returns the paths it verified, relative to Dir.
func (s *Sums) Check() ([]string, error) {
	var done []string
	for _, name := range slices.Sorted(maps.Keys(s.Files)) {
		p := filepath.Join(s.Dir(), filepath.FromSlash(name))
		sum, err := fileSHA256(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("drafter: %s is listed in %s but cannot be read: %w", p, s.Path, err)
		}
		if sum != s.Files[name] {
			return nil, fmt.Errorf("drafter: %s is damaged: its SHA-256 is %s, but %s records %s, written when it was exported; restore the export from a copy, or train again",
				p, sum, s.Path, s.Files[name])
		}
		done = append(done, name)
	}
	return done, nil
}

// Covers returns an error naming the first of files (paths) that the sums
// do not list, or that is listed but absent: a file put beside the export,
// or renamed, after it was written.
func (s *Sums) Covers(files []string) error {
	for _, p := range files {
		r, err := filepath.Rel(s.Dir(), p)
		if err != nil || !inside(p, s.Dir()) {
			return fmt.Errorf("drafter: %s is outside %s, which %s covers", p, s.Dir(), s.Path)
		}
		if _, ok := s.Files[filepath.ToSlash(r)]; !ok {
			return fmt.Errorf("drafter: %s is not listed in %s: it was added or replaced after the export; restore the export from a copy, or train again", p, s.Path)
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("drafter: %s, listed in %s, cannot be read: %w", p, s.Path, err)
		}
	}
	return nil
}

// fileSHA256 returns the lowercase hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
