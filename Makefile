# SPDX-License-Identifier: BSD-3-Clause
# kvlane quick start: `make demo` and `make test` on a fresh Debian 12 machine.
# Both install the Debian packages that are missing, configure build/ and compile first.

BUILD ?= build
ASAN_BUILD ?= build-asan
MESON_OPTS ?=

# Debian packages kvlane builds and tests with (nothing is downloaded from elsewhere; the
# rdma suite's VM boots Debian's own kernel package, fetched with apt-get download).
DEB_PKGS := gcc libc6-dev make meson ninja-build pkg-config python3 clang-format \
	libdpdk-dev dpdk-dev python3-pyelftools libibverbs-dev ibverbs-providers \
	libnuma-dev libinih-dev libssl-dev clang libclang-rt-14-dev python3-dev python3-pytest \
	python3-numpy python3-torch \
	qemu-system-x86 busybox-static cpio kmod xz-utils iproute2 ibverbs-utils perftest ucx-utils
DEB_PKGS += libcurl4-openssl-dev  # issue 19: [cluster] speaks etcd's v3 JSON gateway over libcurl
DEB_PKGS += libjansson-dev  # issue 19: the gateway's JSON bodies and the cluster records; kvlane-serve-bench
DEB_PKGS += etcd-server etcd-client  # issue 19: the cluster suite starts a real etcd on 127.0.0.1
DEB_PKGS += openssl  # issue 19: the cluster suite's TLS scenario makes its own CA (openssl req/x509)
DEB_PKGS += python3-matplotlib  # issue 15: kvlane-serve-bench's PNG plots (tools/serve_plot.py)
DEB_PKGS += iperf3  # issue 15: the tcp baseline's link rate beside iperf3's on the same host
DEB_PKGS += libmicrohttpd-dev  # issue 18: Prometheus /metrics ([telemetry] prometheus_listen)
DEB_PKGS += curl  # issue 18: the eal test scrapes /metrics as a Prometheus server would
DEB_PKGS += python3-prometheus-client  # issue 18: the eal test parses every /metrics line

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build build-asan demo test clean distclean

all: build

deps:
	@missing=""; for p in $(DEB_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' \
			|| missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "Installing missing Debian packages:$$missing"; \
		$(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
	fi

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

# git checks files out 0644; kvlane warns about a secret others can read.
build: deps $(BUILD)/build.ninja
	@chmod 600 config/demo.secret
	ninja -C $(BUILD)

# The unit suite again under AddressSanitizer and UndefinedBehaviorSanitizer.
$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) $(MESON_OPTS) -Db_sanitize=address,undefined -Db_lundef=false \
		-Dcuda=disabled

build-asan: deps $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD)

demo: build
	@python3 tools/demo.py $(BUILD) config/default.ini

# Every suite, then the unit suite under sanitizers; the last line is
# "N passed, N failed, N skipped" from meson's own results of both runs.
test: build build-asan
	@rc=0; meson test -C $(BUILD) --print-errorlogs || rc=$$?; \
	meson test -C $(ASAN_BUILD) --suite unit --print-errorlogs || rc=$$?; \
	python3 tools/test_summary.py $(BUILD)/meson-logs/testlog.json \
		$(ASAN_BUILD)/meson-logs/testlog.json:asan || rc=1; \
	exit $$rc

clean:
	[ ! -d $(BUILD) ] || ninja -C $(BUILD) clean

distclean:
	rm -rf $(BUILD) $(ASAN_BUILD)
