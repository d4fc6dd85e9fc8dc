// Package e2e holds Gatehouse's end-to-end tests. They build the real api and
// worker binaries with the race detector, run two API replicas and a worker
// against a cloned PostgreSQL database and a private redis-server, drive them
// over HTTP from distinct loopback client addresses, and validate every
// response against api/openapi.yaml. The package has no non-test code.
//
// Every test has its own stack (database, redis-server, ports), so the tests
// run side by side (t.Parallel). Most of their time is spent waiting on
// timers, leases and retries: without a -parallel flag, TestMain lets one
// more than GOMAXPROCS of them, and at least 3, run at once. The fault tests at full
// scale (make chaos), and tests that compare figures measured at different
// times (TestRedisCostPerCharge, F12's noisy neighbour) run one at a time.
package e2e
