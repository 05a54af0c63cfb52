# Makefile for the fencing extension (PGXS)
#
#   make                 build fencing.so
#   make install         install into the server that pg_config names
#   make test            everything: packages, build, install, every suite on
#                        throwaway servers, one "N passed, N failed" line
#   make demo            the invoice scenario on a throwaway server
#   make installcheck    the SQL suites against a server you already run
#   make bench           side-by-side ratios (see bench/README.md)
#   make deb             Debian packages postgresql-NN-fencing for every
#                        installed server, into debian-build/ (see
#                        debian/make-deb.sh)

EXTENSION = fencing
MODULE_big = fencing
DATA = $(wildcard fencing--*.sql)
PGFILEDESC = "fencing - fence tokens, named locks and stale-write rejection"

OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c))

PG_CONFIG ?= pg_config

# ICU gives us NFKC_Casefold independent of the database's encoding,
# collation and ctype.
ICU_CFLAGS := $(shell pkg-config --cflags icu-uc icu-i18n 2>/dev/null)
ICU_LIBS := $(shell pkg-config --libs icu-uc icu-i18n 2>/dev/null || echo -licui18n -licuuc)
PG_CPPFLAGS = -I$(srcdir)/src $(ICU_CFLAGS)
SHLIB_LINK += $(ICU_LIBS)

# CI passes WERROR=1.  Unused parameters are the norm for fmgr functions.
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
ifeq ($(WERROR),1)
PG_CFLAGS += -Werror
endif

# The SQL suites, for "make installcheck" against a running server that
# already has fencing in shared_preload_libraries.
REGRESS = $(sort $(basename $(notdir $(wildcard sql/*.sql))))
REGRESS_OPTS = --inputdir=. --load-extension=fencing

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

.PHONY: test demo bench bench-peers test-asan deb

test:
	./test/run_all.sh

test-asan:
	./test/asan.sh

demo:
	./examples/demo.sh

bench:
	./bench/run.sh

bench-peers:
	./bench/peers/run.sh

deb:
	DEB_PG_VERSIONS="$(DEB_PG_VERSIONS)" ./debian/make-deb.sh
