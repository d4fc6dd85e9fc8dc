package apikeys

import "encoding/hex"

// Tag is a key's name in Redis: the hex digest of its secret as a hash tag.
// The key's cache entry and its per-key rate limits carry it, so they share a
// Redis Cluster slot and one script can read the entry and count a request
// against a limit (the API's charge route does).
func Tag(digest []byte) string { return "{" + hex.EncodeToString(digest) + "}" }
