package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/pkg/filecache"
)

// jsonDigest returns the hex SHA-256 of dir/name as canonical JSON (see
// canonicalJSON), without the top-level key drop when drop is not empty, or
// "" when the file does not exist. A cache, with its kind, keeps the digest
// per file identity.
func jsonDigest(dir, name, drop string, cache *filecache.Cache, kind string) (string, error) {
	path := filepath.Join(dir, name)
	id, err := filecache.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var sum string
	if cache.Get(kind, id, &sum) {
		return sum, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	c, err := canonicalJSON(raw, drop)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	s := sha256.Sum256(c)
	sum = hex.EncodeToString(s[:])
	_ = cache.Put(kind, id, sum) // losing it costs the next run a re-read
	return sum, nil
}

// canonicalJSON decodes raw and encodes it again with object keys sorted, no
// spacing, no HTML escaping and numbers in one form (integers as written,
// other numbers in shortest round-trip form), so that re-saving a file with
// other formatting or key order keeps its digest. The top-level key drop is
// left out when drop is not empty.
func canonicalJSON(raw []byte, drop string) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("invalid JSON: data after the top-level value")
	}
	if m, ok := v.(map[string]any); ok && drop != "" {
		delete(m, drop)
	}
	v, err := canonicalNumbers(v)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// canonicalNumbers rewrites, in place, every number that is not an integer
// literal in shortest round-trip form ("1.50" and "15e-1" become "1.5").
func canonicalNumbers(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c, err := canonicalNumbers(e)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
	case []any:
		for i, e := range x {
			c, err := canonicalNumbers(e)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
	case json.Number:
		if !strings.ContainsAny(string(x), ".eE") {
			return x, nil
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", x, err)
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	}
	return v, nil
}
