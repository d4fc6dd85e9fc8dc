// Package migrations embeds Gatehouse's goose SQL migrations so both binaries
// and the tests apply the same schema.
package migrations

import "embed"

// FS holds the *.sql migrations.
//
//go:embed *.sql
var FS embed.FS
