# Shortcuts for the common tasks. Everything is driven by cargo; these targets add the steps
# that need a C compiler, and the installation.
#
#   make demo       build the library, then compile and run examples-c/session_broadcast.c
#   make test       run every test (Rust, C, C++, headers, Python): the same as `cargo test`
#   make header     regenerate include/discovm.h from the Rust sources
#   make build-dist build the libraries `make install` installs (release settings, target/dist/)
#   make install    install the libraries, headers, pkg-config file and CMake package
#   make uninstall  remove what `make install` installed
#
# Installation paths: PREFIX (default /usr/local), LIBDIR (PREFIX/lib), INCLUDEDIR
# (PREFIX/include), and DESTDIR, which is put in front of every path written but not of the
# paths recorded in the pkg-config and CMake files (for staging a package), e.g.
#
#   make install PREFIX=$HOME/.local
#   make install DESTDIR=/tmp/stage PREFIX=/usr

SHELL := bash
.SHELLFLAGS := -euo pipefail -c

CARGO ?= cargo
CC := gcc
CFLAGS := -std=c11 -Wall -Wextra -Werror -Iinclude
TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
LIB_DIR := $(TARGET_DIR)/debug
DEMO := $(TARGET_DIR)/c/session_broadcast

PREFIX = /usr/local
LIBDIR = $(PREFIX)/lib
INCLUDEDIR = $(PREFIX)/include
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n 1)
MAJOR := $(word 1,$(subst ., ,$(VERSION)))
MINOR := $(word 2,$(subst ., ,$(VERSION)))
# Programs linked against libdiscovm.so record this name, so a newer libdiscovm.so.MAJOR.*
# replaces the library under them. Only the installed build carries it: the development
# builds stay loadable under their own file name.
SONAME := libdiscovm.so.$(MAJOR)
DIST_DIR := $(TARGET_DIR)/dist
# The system libraries that programs linking the static library need, as rustc reports them.
NATIVE_LIBS := $(DIST_DIR)/native-static-libs
HEADERS := include/discovm.h include/discovm_abi.h include/discovm.hpp

.PHONY: demo test header lib build-dist install uninstall

lib:
	$(CARGO) build

demo: lib
	@mkdir -p $(dir $(DEMO))
	$(CC) $(CFLAGS) examples-c/session_broadcast.c -o $(DEMO) \
		-L$(LIB_DIR) -ldiscovm -Wl,-rpath,$(LIB_DIR)
	@echo "--- running $(DEMO)"
	@$(DEMO)

test:
	$(CARGO) test

header:
	DVM_WRITE_HEADER=1 $(CARGO) test --test generated_header

build-dist:
	@mkdir -p $(DIST_DIR)
	log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	$(CARGO) rustc --profile dist --lib --color never -- -C link-arg=-Wl,-soname,$(SONAME) \
		--print native-static-libs 2>&1 | tee "$$log"; \
	sed -n 's/^note: native-static-libs: //p' "$$log" > $(NATIVE_LIBS)
	@[[ -s $(NATIVE_LIBS) ]] || { echo "rustc printed no native-static-libs" >&2; exit 1; }

# The pkg-config and CMake files are filled in from the templates in packaging/.
install: build-dist
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(LIBDIR)/cmake/discovm \
		$(DESTDIR)$(INCLUDEDIR)
	install -m 755 $(DIST_DIR)/libdiscovm.so $(DESTDIR)$(LIBDIR)/libdiscovm.so.$(VERSION)
	ln -sfn libdiscovm.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sfn $(SONAME) $(DESTDIR)$(LIBDIR)/libdiscovm.so
	install -m 644 $(DIST_DIR)/libdiscovm.a $(DESTDIR)$(LIBDIR)/libdiscovm.a
	install -m 644 $(HEADERS) $(DESTDIR)$(INCLUDEDIR)/
	@native=$$(cat $(NATIVE_LIBS)); \
	configure() { \
		echo "writing $$2/$$1"; \
		sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
			-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
			-e 's|@MAJOR@|$(MAJOR)|g' -e 's|@MINOR@|$(MINOR)|g' -e 's|@SONAME@|$(SONAME)|g' \
			-e "s|@NATIVE_STATIC_LIBS@|$$native|g" \
			-e "s|@NATIVE_STATIC_LIBS_LIST@|$${native// /;}|g" "packaging/$$1.in" > "$$2/$$1"; \
		chmod 644 "$$2/$$1"; \
	}; \
	configure discovm.pc $(DESTDIR)$(LIBDIR)/pkgconfig; \
	configure discovmConfig.cmake $(DESTDIR)$(LIBDIR)/cmake/discovm; \
	configure discovmConfigVersion.cmake $(DESTDIR)$(LIBDIR)/cmake/discovm

uninstall:
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,libdiscovm.so libdiscovm.so.$(VERSION) $(SONAME) \
		libdiscovm.a pkgconfig/discovm.pc cmake/discovm/discovmConfig.cmake \
		cmake/discovm/discovmConfigVersion.cmake)
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/,$(notdir $(HEADERS)))
	if [[ -d $(DESTDIR)$(LIBDIR)/cmake/discovm ]]; then \
		rmdir --ignore-fail-on-non-empty $(DESTDIR)$(LIBDIR)/cmake/discovm; \
	fi
