//go:build !cgo

package main

// cgoBuild says whether the test binary, like the drafter binary built the
// same way, can load the CUDA driver (a CGO_ENABLED=0 build cannot).
const cgoBuild = false
