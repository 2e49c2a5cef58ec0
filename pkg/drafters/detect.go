package drafters

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ConfigFile is the config.json an export folder describes itself in.
const ConfigFile = "config.json"

// ReadConfig unmarshals dir's config.json into v for a Method's Detect: found
// is false when there is none.
func ReadConfig(dir string, v any) (found bool, err error) {
	path := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("drafter: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("drafter config %s: %w", path, err)
	}
	return true, nil
}

// FileExists reports whether path is a file (not a folder).
func FileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
