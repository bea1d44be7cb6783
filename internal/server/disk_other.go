//go:build !unix

package server

import "errors"

// freeBytes cannot read free space on this system: the watermark is off.
func freeBytes(string) (uint64, error) {
	return 0, errors.New("server: free space is not known on this system")
}
