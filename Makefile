# Shortcuts for the common tasks. Everything is driven by cargo; these targets add the steps
# that need a C compiler.
#
#   make demo     build the library, then compile and run examples-c/session_broadcast.c
#   make test     run every test (Rust, C, headers, Python): the same as `cargo test`
#   make header   regenerate include/discovm.h from the Rust sources

CARGO ?= cargo
CC := gcc
CFLAGS := -std=c11 -Wall -Wextra -Werror -Iinclude
TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
LIB_DIR := $(TARGET_DIR)/debug
DEMO := $(TARGET_DIR)/c/session_broadcast

.PHONY: demo test header lib

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
