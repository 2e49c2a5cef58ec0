//go:build !cgo

package cpu

import "errors"

// OpenBLAS returns an error: a build without cgo cannot load OpenBLAS.
func OpenBLAS() (Backend, error) {
	return nil, errors.New("tensor: OpenBLAS needs a build with cgo; this one has none (CGO_ENABLED=0)")
}
