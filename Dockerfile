# syntax=docker/dockerfile:1
# cleave's container image for those who have Docker. It is the image scripts/build-image.sh
# builds without one (docs/install.md), file for file: both run the script's `rootfs` step
# (the stripped binary, libc6, libgcc-s1 and ca-certificates unpacked from their .debs,
# /etc/passwd with UID 999, /tmp) and put that tree alone on `scratch`; no shell, no package
# manager. Only the .deb versions can differ: each build takes the candidates of its own
# apt lists (both record them in /var/lib/dpkg/status.d/).
#
#   docker build -t cleave:0.1.0 .                          # builds the binary in stage `build`
#   docker build --target prebuilt -t cleave:0.1.0 .        # packages target/release/cleave
#   (add --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD)
#    --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) for the script's labels and times)
#
# Either way the binary is the one CI builds: `cargo build --release --locked` from the
# committed Cargo.lock (scripts/test.sh's last step), on Debian bookworm (glibc 2.36, the
# libc6 the image ships). The binary needs libc, libm, libgcc_s and the loader only.
# No container engine runs on the project's machines: CI builds the image with the script
# (tests/image.rs), not with this file.

ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked && cp target/release/cleave /cleave

# The file tree of the image, from the binary of the build stage (or, for `prebuilt`, the
# one CI built: run `cargo build --release --locked` first).
FROM docker.io/library/debian:bookworm-slim AS rootfs-base
RUN apt-get update && apt-get install -y --no-install-recommends binutils && rm -rf /var/cache/apt/archives/*.deb
WORKDIR /src
ARG SOURCE_DATE_EPOCH=0
ENV SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH}
COPY Cargo.toml ./
COPY scripts/build-image.sh ./scripts/build-image.sh

FROM rootfs-base AS rootfs-prebuilt
COPY target/release/cleave /cleave
RUN CLEAVE_BINARY=/cleave CLEAVE_DEB_CACHE=/tmp/debs scripts/build-image.sh rootfs /rootfs

FROM rootfs-base AS rootfs-built
COPY --from=build /cleave /cleave
RUN CLEAVE_BINARY=/cleave CLEAVE_DEB_CACHE=/tmp/debs scripts/build-image.sh rootfs /rootfs

FROM scratch AS prebuilt
ARG VERSION=0.1.0
ARG REVISION=unknown
COPY --from=rootfs-prebuilt /rootfs /
LABEL org.opencontainers.image.title="cleave" \
      org.opencontainers.image.description="Split Apache Cassandra SSTables by token range without rewriting rows" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/cleave-dev/cleave"
ENV PATH=/usr/local/bin
USER 999:999
ENTRYPOINT ["/usr/local/bin/cleave"]
CMD ["run", "--help"]

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
COPY --from=rootfs-built /rootfs /
LABEL org.opencontainers.image.title="cleave" \
      org.opencontainers.image.description="Split Apache Cassandra SSTables by token range without rewriting rows" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/cleave-dev/cleave"
ENV PATH=/usr/local/bin
USER 999:999
ENTRYPOINT ["/usr/local/bin/cleave"]
CMD ["run", "--help"]
