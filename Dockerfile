# layer0's container image: a static binary on distroless/static (no shell, no package manager),
# running as an unprivileged user. Build from the repository root:
#
#   docker build -t layer0:dev .
#   docker run --rm -p 8080:8080 -p 9090:9090 -v $PWD/layer0.yaml:/etc/layer0/layer0.yaml:ro layer0:dev
#
# The configuration is a mounted file (/etc/layer0/layer0.yaml); it is re-read when it changes.
# It must listen on 0.0.0.0 (server.addr, server.admin_addr) to be reachable from outside the
# container, and it must then configure API keys: layer0 serves without auth only on loopback.

# The Go version is the go.mod's.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/layer0 ./cmd/layer0

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/layer0 /usr/local/bin/layer0
# 65532 is distroless's "nonroot" user; numeric so that runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/layer0", "serve"]
CMD ["--config", "/etc/layer0/layer0.yaml"]
