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
#   make test-fresh      make demo and make test in brand-new Debian roots
#                        (bookworm, trixie, forky), as root; see test/fresh/
#   make dist            the PGXN release zip, fencing-<version>.zip
#   make chaos           failovers under Patroni + etcd with injected faults
#                        and a checked ledger (root; see test/chaos/README.md;
#                        CHAOS_SECONDS, CHAOS_SEED, CHAOS_MODE=sync|async|both)
#   make test-mutants    build deliberately broken versions (one contract
#                        clause each) and check that their tests fail; not
#                        part of make test (see test/mutants/README.md;
#                        MUTANTS="NAME ..." runs only those)

EXTENSION = fencing
MODULE_big = fencing
DATA = $(wildcard fencing--*.sql)
PGFILEDESC = "fencing - fence tokens, named locks and stale-write rejection"

# src/ is built in layers, one folder each (src/README.md); sources include
# their headers as "layer/layer.h", found through -I$(srcdir)/src below.
OBJS = $(patsubst %.c,%.o,$(wildcard src/*/*.c))

# The server to build for: PG_CONFIG if given; else the pg_config of
# PG_MAJOR's server if given; else that of the newest installed Debian server
# (/usr/lib/postgresql/*/bin/postgres), as test/lib/common.sh chooses; else
# the pg_config on PATH.
ifndef PG_CONFIG
ifdef PG_MAJOR
PG_CONFIG := /usr/lib/postgresql/$(PG_MAJOR)/bin/pg_config
else
PG_CONFIG := $(or $(patsubst %/postgres,%/pg_config,$(shell ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -n 1)),pg_config)
endif
endif

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

# The SQL and isolation suites, for "make installcheck" against a running
# server that has fencing in shared_preload_libraries and otherwise any
# settings (defaults will do).  They run in the databases contrib_regression
# and isolation_regression (dropped first if they exist, as PGXS does), and
# leave the server as they found it: installcheck ends by dropping those
# databases, pass or fail (test/installcheck/sql/drop_test_databases.sql,
# run by pg_regress so that the connection options of EXTRA_REGRESS_OPTS
# and the PG* environment apply to it as to the suites).  Nothing in them
# moves the token counter ahead of the clock, resets statistics, or changes
# a setting or a role that outlives them (test/t/054_installcheck.pl).
REGRESS = $(sort $(basename $(notdir $(wildcard sql/*.sql))))
REGRESS_OPTS = --inputdir=. --load-extension=fencing
ISOLATION = $(sort $(basename $(notdir $(wildcard test/isolation/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=fencing
NO_INSTALLCHECK = 1

# Without PGXS (postgresql-server-dev-NN not installed yet) only the
# targets that install what they need work: make test, make demo and
# make test-fresh, run as root.
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
else
all install installcheck clean:
	@echo "PGXS not found ($(PG_CONFIG) --pgxs: '$(PGXS)')." >&2
	@echo "Install the server's development files, e.g. as root:" >&2
	@echo "  apt-get install postgresql-server-dev-NN libicu-dev pkg-config gcc make" >&2
	@echo "(NN: the server's major version).  'make test' and 'make demo' as root install them." >&2
	@exit 1
endif

# PGXS tracks no header dependencies unless the server was configured
# with --enable-depend (Debian's is not): an object built against an older
# header would be linked in as it is, and a struct whose layout changed
# read wrong.  Every object depends on every header; a header change
# rebuilds the module.
$(OBJS): $(wildcard src/*.h src/*/*.h)

.PHONY: test demo bench bench-peers test-asan deb chaos test-mutants

# PGXS's installcheck, followed by the drop of its databases (see REGRESS
# above); the exit status is that of the suites, or of the drop.
ifneq ($(wildcard $(PGXS)),)
installcheck: submake $(REGRESS_PREP)
	@status=0; \
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(REGRESS) || status=1; \
	$(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) $(ISOLATION) || status=1; \
	$(pg_regress_installcheck) --inputdir=test/installcheck \
		--outputdir=test/installcheck/output --use-existing --dbname=postgres \
		drop_test_databases || status=1; \
	exit $$status
endif

test:
	./test/run_all.sh

test-asan:
	./test/asan.sh

test-mutants:
	MUTANTS="$(MUTANTS)" ./test/mutants/run.sh

demo:
	./examples/demo.sh

bench:
	./bench/run.sh

bench-peers:
	./bench/peers/run.sh

deb:
	DEB_PG_VERSIONS="$(DEB_PG_VERSIONS)" ./debian/make-deb.sh

.PHONY: test-fresh dist

test-fresh:
	./test/fresh/run.sh

dist:
	./test/fresh/dist.sh

chaos:
	./test/chaos/run.sh
