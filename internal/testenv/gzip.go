package testenv

import (
	"bytes"
	"compress/gzip"
	"testing"
)

// GzipBomb returns a gzip stream of members members, each of 8 MiB of zeros:
// a valid gzip body (RFC 1952 allows concatenated members) of about 8 KB per
// member that expands to members*8 MiB.
func GzipBomb(t testing.TB, members int) []byte {
	t.Helper()
	zeros := make([]byte, 8<<20)
	return bytes.Repeat(Gzip(t, zeros), members)
}

// Gzip compresses b once, at the best compression.
func Gzip(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
