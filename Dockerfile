# For users with a container engine: the same image `make image` writes
# without one (test/tools/image). The binary is built by `make sidecar`, the same
# command and flags as a local build, for the target platform
# (docker buildx build --platform linux/amd64,linux/arm64 builds both); the
# runtime stage is that binary alone on an empty base, uid 0 (the driver's
# socket is root's; the pod drops every capability, see README "Image"),
# with the same labels. deploy/image_test.go holds the two to each other.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Declared without a default: buildx (and buildah/podman) set them from
# --platform, and a default here would override what they pass, shipping
# the build machine's binary under every platform. Unset (a builder without
# platforms), GOOS and GOARCH are empty and Go builds for the build machine.
ARG TARGETOS
ARG TARGETARCH
RUN GOOS=${TARGETOS} GOARCH=${TARGETARCH} make sidecar VERSION=${VERSION}

FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/cozystack/csi-clone-sidecar" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /src/bin/csi-clone-sidecar /csi-clone-sidecar
USER 0:0
ENTRYPOINT ["/csi-clone-sidecar"]
