package main

import (
	"os"

	"github.com/drafter-ai/drafter/pkg/filecache"
)

// fileCache is the cache of results computed from files (the model's tensor
// digests): $DRAFTER_CACHE_DIR, else drafter/ in the user's cache folder.
func fileCache() *filecache.Cache {
	return filecache.New(filecache.Dir(os.Getenv(filecache.EnvDir)))
}
