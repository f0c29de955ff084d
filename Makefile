# Shortcuts for the common tasks. Everything is driven by cargo; these targets add the steps
# that need a C compiler, and the installation.
#
#   make demo       build the library, then compile and run examples-c/session_broadcast.c
#   make test       run every test (Rust, C, C++, headers, Python): the same as `cargo test`
#   make header     regenerate include/discovm.h from the Rust sources
#   make build-dist build the libraries `make install` installs (release settings, target/dist/)
#   make install    install the libraries, headers, pkg-config file, CMake package and the
#                   worker program of process sessions and the node program of sessions
#                   across machines (discovm-worker and discovm-node, in BINDIR)
#   make uninstall  remove what `make install` installed
#   make install-relocatable STAGEDIR=dir
#                   the same files under dir, with the pkg-config file and the CMake package
#                   finding the others relative to themselves (the Python wheel ships this)
#
# Installation paths: PREFIX (default /usr/local), LIBDIR (PREFIX/lib), INCLUDEDIR
# (PREFIX/include), BINDIR (PREFIX/bin), and DESTDIR, which is put in front of every path written but not of the
# paths recorded in the pkg-config and CMake files (for staging a package), e.g.
#
#   make install PREFIX=$HOME/.local
#   make install DESTDIR=/tmp/stage PREFIX=/usr

SHELL := bash
.SHELLFLAGS := -euo pipefail -c

CARGO ?= cargo
CC := gcc
CFLAGS := -std=c11 -Wall -Wextra -Werror -Iinclude
CXX := g++
GLOO_CXXFLAGS := -std=c++17 -O2 -Wall -Wextra -Werror -shared -fPIC
GLOO_INCLUDE := /usr/include
TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
LIB_DIR := $(TARGET_DIR)/debug
DEMO := $(TARGET_DIR)/c/session_broadcast

PREFIX = /usr/local
LIBDIR = $(PREFIX)/lib
INCLUDEDIR = $(PREFIX)/include
BINDIR = $(PREFIX)/bin
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

.PHONY: demo test header lib gloo-plugin build-dist install install-relocatable uninstall

# The library, and next to it the worker program process sessions start by default, the node
# program of sessions across machines and, where Gloo is installed, the plugin that runs the
# collectives between nodes.
lib:
	$(CARGO) build
	for program in discovm-worker discovm-node; do \
		$(CC) $(CFLAGS) programs/$$program.c -o $(LIB_DIR)/$$program \
			-L$(LIB_DIR) -ldiscovm -Wl,-rpath,$(LIB_DIR) || exit 1; \
	done
	$(MAKE) --no-print-directory gloo-plugin PLUGIN_DIR=$(LIB_DIR)

# The Gloo plugin (plugins/gloo), built only where Gloo's headers are (Debian: libgloo-dev).
gloo-plugin:
	@if [ -f $(GLOO_INCLUDE)/gloo/allreduce.h ]; then \
		echo "$(CXX) $(GLOO_CXXFLAGS) plugins/gloo/discovm_gloo.cc -o $(PLUGIN_DIR)/libdiscovm_gloo.so -lgloo"; \
		$(CXX) $(GLOO_CXXFLAGS) -I$(GLOO_INCLUDE) plugins/gloo/discovm_gloo.cc \
			-o $(PLUGIN_DIR)/libdiscovm_gloo.so -lgloo; \
	else \
		echo "Gloo is not installed (Debian: apt-get install libgloo-dev): no collectives between nodes"; \
	fi

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

# The recipe `install` and `install-relocatable` share: it copies the libraries and headers into
# DEST_LIBDIR and DEST_INCLUDEDIR, and fills in the pkg-config file and the CMake package from
# the templates in packaging/ with the paths they record: PC_PREFIX, PC_LIBDIR and PC_INCLUDEDIR
# in discovm.pc, CMAKE_PREFIX, CMAKE_LIBDIR and CMAKE_INCLUDEDIR in the CMake files.
define install_files
	install -d $(DEST_LIBDIR)/pkgconfig $(DEST_LIBDIR)/cmake/discovm $(DEST_INCLUDEDIR) \
		$(DEST_BINDIR)
	install -m 755 $(DIST_DIR)/libdiscovm.so $(DEST_LIBDIR)/libdiscovm.so.$(VERSION)
	ln -sfn libdiscovm.so.$(VERSION) $(DEST_LIBDIR)/$(SONAME)
	ln -sfn $(SONAME) $(DEST_LIBDIR)/libdiscovm.so
	install -m 644 $(DIST_DIR)/libdiscovm.a $(DEST_LIBDIR)/libdiscovm.a
	install -m 644 $(HEADERS) $(DEST_INCLUDEDIR)/
	for program in discovm-worker discovm-node; do \
		$(CC) $(CFLAGS) programs/$$program.c -o $(DEST_BINDIR)/$$program -L$(DIST_DIR) \
			-ldiscovm \
			-Wl,-rpath,'$$ORIGIN/$(shell realpath -m --relative-to=$(DEST_BINDIR) $(DEST_LIBDIR))' \
			|| exit 1; \
	done
	$(MAKE) --no-print-directory gloo-plugin PLUGIN_DIR=$(DEST_LIBDIR)
	@native=$$(cat $(NATIVE_LIBS)); \
	configure() { \
		echo "writing $$2/$$1"; \
		sed -e "s|@PREFIX@|$$3|g" -e "s|@LIBDIR@|$$4|g" -e "s|@INCLUDEDIR@|$$5|g" \
			-e 's|@VERSION@|$(VERSION)|g' \
			-e 's|@MAJOR@|$(MAJOR)|g' -e 's|@MINOR@|$(MINOR)|g' -e 's|@SONAME@|$(SONAME)|g' \
			-e "s|@NATIVE_STATIC_LIBS@|$$native|g" \
			-e "s|@NATIVE_STATIC_LIBS_LIST@|$${native// /;}|g" "packaging/$$1.in" > "$$2/$$1"; \
		chmod 644 "$$2/$$1"; \
	}; \
	configure discovm.pc $(DEST_LIBDIR)/pkgconfig \
		'$(PC_PREFIX)' '$(PC_LIBDIR)' '$(PC_INCLUDEDIR)'; \
	for file in discovmConfig.cmake discovmConfigVersion.cmake; do \
		configure $$file $(DEST_LIBDIR)/cmake/discovm \
			'$(CMAKE_PREFIX)' '$(CMAKE_LIBDIR)' '$(CMAKE_INCLUDEDIR)'; \
	done
endef

install: DEST_LIBDIR = $(DESTDIR)$(LIBDIR)
install: DEST_INCLUDEDIR = $(DESTDIR)$(INCLUDEDIR)
install: DEST_BINDIR = $(DESTDIR)$(BINDIR)
install: PC_PREFIX = $(PREFIX)
install: PC_LIBDIR = $(LIBDIR)
install: PC_INCLUDEDIR = $(INCLUDEDIR)
install: CMAKE_PREFIX = $(PREFIX)
install: CMAKE_LIBDIR = $(LIBDIR)
install: CMAKE_INCLUDEDIR = $(INCLUDEDIR)
install: build-dist
	$(install_files)

# STAGEDIR gets lib/ and include/ as a prefix does; discovm.pc finds them from its own directory
# (pkg-config's ${pcfiledir}), the CMake package from its own (${CMAKE_CURRENT_LIST_DIR}).
ifneq ($(filter install-relocatable,$(MAKECMDGOALS)),)
ifeq ($(STAGEDIR),)
$(error make install-relocatable needs STAGEDIR=<directory>)
endif
endif
install-relocatable: DEST_LIBDIR = $(abspath $(STAGEDIR))/lib
install-relocatable: DEST_INCLUDEDIR = $(abspath $(STAGEDIR))/include
install-relocatable: DEST_BINDIR = $(abspath $(STAGEDIR))/bin
install-relocatable: PC_PREFIX = $${pcfiledir}/../..
install-relocatable: PC_LIBDIR = $${prefix}/lib
install-relocatable: PC_INCLUDEDIR = $${prefix}/include
install-relocatable: CMAKE_PREFIX = $${CMAKE_CURRENT_LIST_DIR}/../../..
install-relocatable: CMAKE_LIBDIR = $${CMAKE_CURRENT_LIST_DIR}/../..
install-relocatable: CMAKE_INCLUDEDIR = $${CMAKE_CURRENT_LIST_DIR}/../../../include
install-relocatable: build-dist
	$(install_files)

uninstall:
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,libdiscovm.so libdiscovm.so.$(VERSION) $(SONAME) \
		libdiscovm.a libdiscovm_gloo.so pkgconfig/discovm.pc cmake/discovm/discovmConfig.cmake \
		cmake/discovm/discovmConfigVersion.cmake)
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/,$(notdir $(HEADERS)))
	rm -f $(DESTDIR)$(BINDIR)/discovm-worker $(DESTDIR)$(BINDIR)/discovm-node
	if [[ -d $(DESTDIR)$(LIBDIR)/cmake/discovm ]]; then \
		rmdir --ignore-fail-on-non-empty $(DESTDIR)$(LIBDIR)/cmake/discovm; \
	fi
