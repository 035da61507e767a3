# syntax=docker/dockerfile:1
# cleave's container image: the stripped release binary on distroless/cc (glibc, libgcc; no
# shell, no package manager), as UID 999 by default (Cassandra's in the official images).
#
#   docker build -t cleave:0.1.0 .                          # builds the binary in stage `build`
#   docker build --target prebuilt -t cleave:0.1.0 .        # packages target/release/cleave
#
# Either way the binary is the one CI builds: `cargo build --release --locked` from the
# committed Cargo.lock (scripts/test.sh's last step, so that target/release/cleave is that
# binary when the prebuilt target copies it), on Debian bookworm (the glibc of
# distroless/cc-debian12). The tests run cargo test's own link of the same sources and lock
# (cargo resolves it as a separate unit with the dev-dependencies in the graph; the two
# differ in hash).
# The release profile keeps line tables (debug = 1) for backtraces in CI; the image strips
# them (128 MB -> 18 MB measured). The binary needs libc, libm, libgcc_s only, and glibc
# symbols up to GLIBC_2.34 (objdump -T), which distroless/cc-debian12 (glibc 2.36) provides.
# No container engine runs on the project's machines: this file is not built in CI.

ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
    && strip --strip-debug -o /cleave target/release/cleave

# The binary CI built, from the build context (run `cargo build --release --locked` first).
FROM docker.io/library/debian:bookworm-slim AS strip-prebuilt
RUN apt-get update && apt-get install -y --no-install-recommends binutils && rm -rf /var/lib/apt/lists/*
COPY target/release/cleave /cleave.full
RUN strip --strip-debug -o /cleave /cleave.full

FROM gcr.io/distroless/cc-debian12:nonroot AS prebuilt
COPY --from=strip-prebuilt /cleave /usr/local/bin/cleave
USER 999:999
ENTRYPOINT ["/usr/local/bin/cleave"]
CMD ["run", "--help"]

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="cleave" \
      org.opencontainers.image.description="Split Apache Cassandra SSTables by token range without rewriting rows" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /cleave /usr/local/bin/cleave
USER 999:999
ENTRYPOINT ["/usr/local/bin/cleave"]
CMD ["run", "--help"]
