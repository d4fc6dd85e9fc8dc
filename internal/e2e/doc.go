// Package e2e holds Gatehouse's end-to-end tests. They build the real api and
// worker binaries with the race detector, run two API replicas and a worker
// against a cloned PostgreSQL database and a private redis-server, drive them
// over HTTP from distinct loopback client addresses, and validate every
// response against api/openapi.yaml. The package has no non-test code.
//
// Every test has its own stack (database, redis-server, ports), so the tests
// run side by side (t.Parallel). Most of their time is spent waiting on
// timers, leases and retries: without a -parallel flag, TestMain lets one
// more than GOMAXPROCS of them, and at least 3, run at once, the longest
// first (schedule_test.go), so that short tests fill the end. The fault tests
// and the tests with a promise about time run one at a time at full scale
// (make chaos, chaosParallel), as does TestRedisCostPerCharge, a measurement.
//
// Beside each other and another package's tests on shared cores, the tests
// assert what happened (nothing lost, nothing doubled, the right answers and
// counts), never how fast: a latency, a percentile, a ratio or a bound in
// seconds is asserted at full scale only (chaosFull) and logged otherwise. A
// wait for something expected polls for at least a minute (patience), and a
// wait for a backlog goes on while the backlog drains (stallLimit).
package e2e
