# The feed binary, for compose.yaml and production images.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# .dockerignore leaves .git out: the revision `feed version` and
# feed_build_info report comes from this argument,
#   docker build --build-arg FEED_REVISION=$(git rev-parse HEAD) .
ARG FEED_REVISION=unknown
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -X main.stampedRevision=${FEED_REVISION}" -o /out/feed ./cmd/feed

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/feed /usr/local/bin/feed
USER nonroot
ENTRYPOINT ["/usr/local/bin/feed"]
