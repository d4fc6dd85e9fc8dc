// Package e2e holds Gatehouse's end-to-end tests. They build the real api and
// worker binaries with the race detector, run two API replicas and a worker
// against a cloned PostgreSQL database and a private redis-server, drive them
// over HTTP from distinct loopback client addresses, and validate every
// response against api/openapi.yaml. The package has no non-test code.
package e2e
