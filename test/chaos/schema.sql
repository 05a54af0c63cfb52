-- test/chaos/schema.sql
--		The invoice ledger of the chaos test, its audit trail, and the role
--		its workers log in as.  Run once, as superuser, in database "chaos" on
--		the first primary (fencing is in shared_preload_libraries on every
--		node, set through Patroni's configuration).
--
-- psql variables: customers (how many), periods (how many months exist to
-- be billed), unprotect ('on' leaves every table without its fence: the
-- test-only mode that shows the checker failing).

\set ON_ERROR_STOP on
SET client_min_messages = warning;

CREATE EXTENSION fencing;

CREATE SCHEMA billing;
CREATE SCHEMA chaos;

CREATE TABLE billing.customers (
	customer_id	integer PRIMARY KEY,
	name		text NOT NULL,
	monthly_fee	numeric(10,2) NOT NULL
);

-- One row per customer; every invoice run moves its balance and its fence.
CREATE TABLE billing.accounts (
	customer_id	integer PRIMARY KEY REFERENCES billing.customers,
	balance		numeric(12,2) NOT NULL DEFAULT 0,
	fence		bigint
);

-- The months there are to bill.  A month is billed when billing.runs has a
-- row for it; there is deliberately no unique constraint on runs, invoices
-- or ledger per month: "billed exactly once" must come from the lock and
-- the fences, not from a constraint that would hide their failure.
CREATE TABLE billing.periods (
	period		text PRIMARY KEY
);

CREATE TABLE billing.runs (
	run_id		bigserial PRIMARY KEY,
	period		text NOT NULL REFERENCES billing.periods,
	token		bigint NOT NULL,
	worker		text NOT NULL,
	attempt		text NOT NULL
);
CREATE INDEX ON billing.runs (period);

-- Ledger rows carry the token of the run that wrote them (fence = token).
CREATE TABLE billing.ledger (
	entry_id	bigserial PRIMARY KEY,
	customer_id	integer NOT NULL REFERENCES billing.customers,
	period		text NOT NULL,
	amount		numeric(10,2) NOT NULL,
	token		bigint NOT NULL,
	fence		bigint,
	attempt		text NOT NULL
);

-- Invoices go in with the ledger rows, in the same transaction, unfenced:
-- the run's check_fence and the accounts' fences stand for them.
CREATE TABLE billing.invoices (
	invoice_id	bigserial PRIMARY KEY,
	customer_id	integer NOT NULL REFERENCES billing.customers,
	period		text NOT NULL,
	amount		numeric(10,2) NOT NULL,
	token		bigint NOT NULL,
	worker		text NOT NULL,
	attempt		text NOT NULL
);
CREATE INDEX ON billing.invoices (period);

-- Written by the holder pattern that spans transactions: a sweep claims
-- "statements:<sweep>" once, then writes batch after batch, each in a
-- transaction of its own with SET LOCAL fencing.token = its token.
CREATE TABLE billing.statements (
	sweep		integer NOT NULL,
	customer_id	integer NOT NULL REFERENCES billing.customers,
	generation	integer NOT NULL,
	worker		text NOT NULL,
	attempt		text NOT NULL,
	fence		bigint,
	PRIMARY KEY (sweep, customer_id)
);

-- Written by the lease workers' batch job: a run of job <k> holds the lease
-- "batch-job:<k>" (fencing.acquire_lease) across its transactions; each
-- batch starts with fencing.use_lease, which raises the job's resource
-- fence to the token and sets fencing.token, so the trigger stamps the rows
-- (a few of the job's items per batch, in an order of the run's own).
CREATE TABLE billing.job_rows (
	job			integer NOT NULL,
	item		integer NOT NULL,
	generation	integer NOT NULL,
	worker		text NOT NULL,
	attempt		text NOT NULL,
	fence		bigint,
	PRIMARY KEY (job, item)
);

-- One row per batch of a lease run, written after use_lease: with the job's
-- resource fence and fencing.token as the batch saw them.  use_lease keeps
-- the job's row of fencing.resource_fences locked until the batch ends, so
-- the batches of one job that commit take seq in the order they commit.
CREATE TABLE chaos.lease_batches (
	attempt		text PRIMARY KEY,
	name		text NOT NULL,
	token		bigint NOT NULL,
	worker		text NOT NULL,
	resource_fence bigint,
	token_setting text,
	seq			bigserial NOT NULL
);

-- Every transaction a worker commits inserts its attempt here, so the
-- checker can tell which acknowledged commits the final database has.
CREATE TABLE chaos.commits (
	attempt		text PRIMARY KEY,
	worker		text NOT NULL,
	kind		text NOT NULL,
	token		bigint NOT NULL,
	node		inet,
	committed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Every row version the fence let through on a protected table, written
-- in the writer's own transaction by an AFTER trigger (which runs after
-- fencing.reject_stale, so it sees the fence as stamped).
CREATE TABLE chaos.audit (
	audit_id	bigserial PRIMARY KEY,
	tbl			text NOT NULL,
	row_key		text NOT NULL,
	op			text NOT NULL,
	old_fence	bigint,
	new_fence	bigint,
	token_setting text,
	attempt		text,
	xid			xid8 NOT NULL DEFAULT pg_current_xact_id(),
	node		inet DEFAULT inet_server_addr(),
	at			timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON chaos.audit (xid);

CREATE FUNCTION chaos.audit_fence() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	key text;
BEGIN
	IF TG_TABLE_NAME = 'statements' THEN
		key := CASE WHEN TG_OP = 'DELETE' THEN OLD.sweep || '/' || OLD.customer_id
					ELSE NEW.sweep || '/' || NEW.customer_id END;
	ELSIF TG_TABLE_NAME = 'job_rows' THEN
		key := CASE WHEN TG_OP = 'DELETE' THEN OLD.job || '/' || OLD.item
					ELSE NEW.job || '/' || NEW.item END;
	ELSE
		key := CASE WHEN TG_OP = 'DELETE' THEN OLD.customer_id::text
					ELSE NEW.customer_id::text END;
	END IF;
	INSERT INTO chaos.audit (tbl, row_key, op, old_fence, new_fence, token_setting, attempt)
	VALUES (TG_TABLE_NAME, key, TG_OP,
			CASE WHEN TG_OP <> 'INSERT' THEN OLD.fence END,
			CASE WHEN TG_OP <> 'DELETE' THEN NEW.fence END,
			current_setting('fencing.token', true),
			current_setting('chaos.attempt', true));
	RETURN NULL;
END
$$;

CREATE TRIGGER zz_audit_fence AFTER INSERT OR UPDATE OR DELETE ON billing.accounts
	FOR EACH ROW EXECUTE FUNCTION chaos.audit_fence();
CREATE TRIGGER zz_audit_fence AFTER INSERT OR UPDATE OR DELETE ON billing.statements
	FOR EACH ROW EXECUTE FUNCTION chaos.audit_fence();
CREATE TRIGGER zz_audit_fence AFTER INSERT OR UPDATE OR DELETE ON billing.job_rows
	FOR EACH ROW EXECUTE FUNCTION chaos.audit_fence();

INSERT INTO billing.customers (customer_id, name, monthly_fee)
SELECT i, 'customer ' || i, 10 + i FROM generate_series(1, :customers) AS i;
-- The accounts start with a fence from a real token, written before the
-- table is protected.
INSERT INTO billing.accounts (customer_id, fence)
SELECT customer_id, fencing.next_token() FROM billing.customers;

INSERT INTO billing.periods (period)
SELECT to_char(date '2001-01-01' + make_interval(months => i), 'YYYY-MM')
  FROM generate_series(0, :periods - 1) AS i;

SELECT fencing.protect('billing.accounts');
SELECT fencing.protect('billing.ledger');
SELECT fencing.protect('billing.statements');
SELECT fencing.protect('billing.job_rows');

\if :unprotect
SELECT fencing.unprotect('billing.accounts');
SELECT fencing.unprotect('billing.ledger');
SELECT fencing.unprotect('billing.statements');
SELECT fencing.unprotect('billing.job_rows');
\endif

CREATE ROLE chaos_worker LOGIN;
GRANT USAGE ON SCHEMA billing, chaos TO chaos_worker;
GRANT SELECT ON ALL TABLES IN SCHEMA billing TO chaos_worker;
GRANT INSERT, UPDATE ON billing.accounts, billing.runs, billing.ledger, billing.invoices,
	billing.statements, billing.job_rows TO chaos_worker;
GRANT INSERT, SELECT ON chaos.commits, chaos.audit, chaos.lease_batches TO chaos_worker;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA billing, chaos TO chaos_worker;
-- check_fence raises a resource's watermark, and use_lease that of the
-- lease's name: each needs a grant of its own (doc/guarantees.md F9),
-- given here to the workers' role.
GRANT EXECUTE ON FUNCTION fencing.check_fence(text, bigint) TO chaos_worker;
GRANT EXECUTE ON FUNCTION fencing.use_lease(text, bigint) TO chaos_worker;
