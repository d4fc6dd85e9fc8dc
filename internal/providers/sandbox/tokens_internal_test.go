package sandbox

import (
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Every token the sandbox takes is one of the documented test tokens, so
// the server's sandbox account keeps taking each of them.
func TestTokensAreDocumentedTestTokens(t *testing.T) {
	for tok := range tokens {
		if !providers.TestToken(tok) {
			t.Errorf("the sandbox takes %s, which providers.TestToken does not", tok)
		}
	}
}
