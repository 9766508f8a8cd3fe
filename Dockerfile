# The controller image: a Rust builder stage, then `scratch` with only what
# scripts/image-rootfs lays out (the binary, the shared libraries ldd lists and the
# loader, a CA bundle, /etc/passwd with the non-root user 65532). No shell.
#
#   docker build -t configrollout-controller:0.1.0 .
#
# Without a Docker daemon, `make image` builds this same file with buildah: it builds the
# binary on the host, runs the same scripts/image-rootfs, and hands the result in as the
# `builder` stage (buildah build --build-context builder=...), so only the final stage
# below runs and no base image is pulled.

FROM docker.io/library/rust:1-bookworm AS builder
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin configrollout-controller \
 && scripts/image-rootfs target/release/configrollout-controller /rootfs

FROM scratch
COPY --from=builder /rootfs/ /
# nonroot in the image's /etc/passwd; numeric so that runAsNonRoot can check it.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/configrollout-controller"]
LABEL org.opencontainers.image.title="configrollout-controller" \
      org.opencontainers.image.description="Rolls out configuration revisions across regional Kubernetes clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
