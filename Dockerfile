# syntax=docker/dockerfile:1
#
# One image for every Gatehouse process:
#   /usr/local/bin/api          HTTP API (default entrypoint); `api migrate`, `api merchant create ...`
#   /usr/local/bin/worker       job worker
#   /usr/local/bin/healthcheck  `healthcheck URL` exits 0 when URL answers 2xx; the
#                               runtime image has no shell or curl, so container
#                               health checks use this.
#
#   docker build -t gatehouse .
#   docker run --rm -e DATABASE_URL=... -e REDIS_URL=... -e JWT_SECRET=... -e ENCRYPTION_KEY=... gatehouse
#
# Configuration comes only from the environment: DATABASE_URL, REDIS_URL, JWT_SECRET,
# ENCRYPTION_KEY, HTTP_ADDR, METRICS_ADDR, LOG_LEVEL, RATE_LIMIT_*, TRUSTED_PROXIES, ...

# The builder runs natively and cross-compiles (pure Go, CGO_ENABLED=0) for the target.
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
ARG TARGETOS TARGETARCH
# The release reported in gatehouse_build_info: docker build --build-arg VERSION=v1.2.3 .
ARG VERSION=dev
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath GOOS=$TARGETOS GOARCH=$TARGETARCH

# Dependencies first, so code changes do not invalidate the module cache layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download

COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w -X github.com/gatehouse-pay/gatehouse/internal/metrics.Version=${VERSION}" -o /out/ ./cmd/api ./cmd/worker

# A tiny probe for HEALTHCHECK (standard library only, built outside the module).
COPY <<'EOF' /healthcheck/main.go
// Command healthcheck exits 0 if the URL given as its only argument answers 2xx within 3 s.
package main

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: healthcheck URL")
		os.Exit(2)
	}
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintln(os.Stderr, resp.Status)
		os.Exit(1)
	}
}
EOF
RUN --mount=type=cache,target=/root/.cache/go-build \
    cd /healthcheck && go mod init healthcheck && go build -trimpath -ldflags='-s -w' -o /out/healthcheck .

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.source="https://github.com/gatehouse-pay/gatehouse" \
      org.opencontainers.image.description="Gatehouse payment gateway: api, worker and migrations" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/api /usr/local/bin/api
COPY --from=build /out/worker /usr/local/bin/worker
COPY --from=build /out/healthcheck /usr/local/bin/healthcheck
# The distroless "nonroot" user by number, so Kubernetes can verify
# runAsNonRoot without a runAsUser in the pod spec.
USER 65532:65532
ENV HTTP_ADDR=:8080 METRICS_ADDR=:9091
# 8080 api, 9091 worker health and metrics, 9092 worker queue UI (ADMIN_ADDR).
EXPOSE 8080 9091 9092
# No image-wide HEALTHCHECK: api and worker listen on different ports. Use e.g.
#   /usr/local/bin/healthcheck 'http://127.0.0.1:8079/readyz?exclude=redis'   (api, PROBE_ADDR=:8079)
#   /usr/local/bin/healthcheck 'http://127.0.0.1:9091/readyz?exclude=redis&exclude=postgres'   (worker)
ENTRYPOINT ["/usr/local/bin/api"]
