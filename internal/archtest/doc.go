// Package archtest holds the test that keeps Gatehouse's dependency arrows
// pointing inward: internal/resource (the API's JSON shapes) is the lowest
// layer and imports the standard library only, domain packages never import
// transport, storage or queue libraries, and nothing imports a command.
package archtest
