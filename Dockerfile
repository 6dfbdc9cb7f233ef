# The binary is built by `make sidecar`, the same command and flags as a
# local build; the runtime image is distroless static: no shell, non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make sidecar VERSION=${VERSION}

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/csi-clone-sidecar /csi-clone-sidecar
USER 65532:65532
ENTRYPOINT ["/csi-clone-sidecar"]
