// Package archtest holds the test that keeps Gatehouse's dependency arrows
// pointing inward: domain packages never import transport, storage or queue
// libraries, and nothing imports a command.
package archtest
