# The feed binary, for compose.yaml and production images.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/feed ./cmd/feed

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/feed /usr/local/bin/feed
USER nonroot
ENTRYPOINT ["/usr/local/bin/feed"]
