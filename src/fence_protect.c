/*-------------------------------------------------------------------------
 *
 * fence_protect.c
 *		fencing.protect() and fencing.unprotect(): validate a table and
 *		install or remove the reject_stale trigger (fence_trigger.c).
 *
 * The trigger is only as good as the table it sits on, so the checks that
 * can be made once, when a DBA protects a table, are made here, where a
 * mistake is easy to fix: the table is an ordinary or partitioned table the
 * caller owns, and the fence column is a plain bigint that writers assign.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence_protect.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "catalog/catalog.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "fencing.h"

PG_FUNCTION_INFO_V1(fencing_protect);
PG_FUNCTION_INFO_V1(fencing_unprotect);

/*
 * Check that the caller may put a fence on relid and lock it against
 * concurrent DDL until the end of the transaction.  Ownership is checked
 * before the lock is taken, so a role cannot use protect() to block tables
 * it does not own.  Only ordinary and partitioned tables qualify: a view
 * has no rows of its own, a foreign table's rows live elsewhere, and system
 * catalogs are written by the server itself.  Temporary tables are allowed
 * (they are ordinary tables of the session).
 */
static Relation
fence_open_owned_table(Oid relid, const char *caller)
{
	Relation	rel;
	char		relkind;
	char	   *relname;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s: table OID 0 does not name a table", caller)));

	relkind = get_rel_relkind(relid);
	relname = get_rel_name(relid);
	if (relkind == '\0' || relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s: relation with OID %u does not exist", caller, relid)));

	if (IsCatalogRelationOid(relid) ||
		IsCatalogNamespace(get_rel_namespace(relid)) ||
		IsToastNamespace(get_rel_namespace(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s: \"%s\" is a system catalog", caller, relname),
				 errdetail("System catalogs are written by the server, not by lock holders.")));

	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("%s: \"%s\" is not a table", caller, relname),
				 errdetail_relkind_not_supported(relkind),
				 errhint("Fences are checked on ordinary and partitioned tables; protect the table that stores the rows.")));

	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, get_relkind_objtype(relkind), relname);

	/* the lock CREATE TRIGGER takes; then make sure the table is still there */
	rel = try_relation_open(relid, ShareRowExclusiveLock);
	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s: relation \"%s\" was dropped concurrently", caller, relname)));
	return rel;
}

/*
 * Run the CREATE OR REPLACE TRIGGER or DROP TRIGGER that protect() and
 * unprotect() built.  Going through SPI keeps the trigger definition in the
 * one readable statement a DBA would type; both callers have checked
 * ownership and quoted every name before.
 */
static void
run_trigger_ddl(const char *sql)
{
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute(sql, false, 0);
	if (rc != SPI_OK_UTILITY)
		elog(ERROR, "SPI_execute of \"%s\" returned %s", sql, SPI_result_code_string(rc));
	SPI_finish();
}

/*
 * Check that "column" of rel can be a fence: an ordinary bigint column that
 * writers assign.  protect() calls it for the table it is given, so that a
 * mistake is reported when it is easy to fix, and for every table it puts
 * the trigger on; "caller" names the function in the messages.
 */
void
fencing_validate_fence_column(Relation rel, const char *column, const char *caller)
{
	AttrNumber	attnum;
	Form_pg_attribute attr;

	attnum = get_attnum(RelationGetRelid(rel), column);
	if (attnum == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("%s: column \"%s\" of table \"%s\" does not exist",
						caller, column, RelationGetRelationName(rel)),
				 errhint("Add a fence column first: ALTER TABLE ... ADD COLUMN %s bigint.",
						 quote_identifier(column))));
	if (attnum < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: \"%s\" is a system column of table \"%s\"",
						caller, column, RelationGetRelationName(rel)),
				 errdetail("The fence must be an ordinary bigint column that writers assign.")));

	attr = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	if (attr->atttypid != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s: fence column \"%s\" of table \"%s\" must be of type bigint, not %s",
						caller, column, RelationGetRelationName(rel),
						format_type_be(attr->atttypid)),
				 errdetail("Fence tokens are bigint.")));
	if (attr->attgenerated != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_COLUMN_DEFINITION),
				 errmsg("%s: fence column \"%s\" of table \"%s\" is a generated column",
						caller, column, RelationGetRelationName(rel)),
				 errdetail("The fence must be written by the lock holder.")));
}

/*
 * fencing.protect(tbl regclass, fence_column name, on_stale text): validate
 * the table and the column up front, where a mistake is easy to fix, then
 * install (or replace) the trigger under a fixed name so that running it
 * again, perhaps with another column or mode, is harmless.  The statement is
 * built from quoted identifiers and literals and names every object with its
 * schema, so the caller's search_path cannot change what it does.
 */
Datum
fencing_protect(PG_FUNCTION_ARGS)
{
	Oid			relid;
	const char *column;
	char	   *mode;
	Relation	rel;
	char	   *qualified;
	StringInfoData sql;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("fencing.protect(): %s must not be null",
						PG_ARGISNULL(0) ? "the table" :
						PG_ARGISNULL(1) ? "fence_column" : "on_stale")));

	relid = PG_GETARG_OID(0);
	column = NameStr(*PG_GETARG_NAME(1));
	mode = text_to_cstring(PG_GETARG_TEXT_PP(2));

	if (strcmp(mode, "error") != 0 && strcmp(mode, "skip") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fencing.protect(): invalid on_stale value \"%s\"", mode),
				 errhint("Use 'error' (stale writes fail) or 'skip' (stale writes touch no row).")));

	rel = fence_open_owned_table(relid, "fencing.protect()");

	fencing_validate_fence_column(rel, column, "fencing.protect()");

	qualified = fencing_qualified_relname(rel);
	relation_close(rel, NoLock);

	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "CREATE OR REPLACE TRIGGER " FENCE_TRIGGER_NAME
					 " BEFORE INSERT OR UPDATE OR DELETE ON %s"
					 " FOR EACH ROW EXECUTE FUNCTION fencing.reject_stale(%s, %s)",
					 qualified, quote_literal_cstr(column), quote_literal_cstr(mode));

	run_trigger_ddl(sql.data);

	PG_RETURN_VOID();
}

/*
 * fencing.unprotect(tbl regclass): remove the trigger protect() installed.
 * Removing a fence is as sensitive as installing one, so the same checks
 * apply; a table that is not protected is left as it is.
 */
Datum
fencing_unprotect(PG_FUNCTION_ARGS)
{
	Relation	rel;
	char	   *qualified;
	StringInfoData sql;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("fencing.unprotect(): the table must not be null")));

	rel = fence_open_owned_table(PG_GETARG_OID(0), "fencing.unprotect()");
	qualified = fencing_qualified_relname(rel);
	relation_close(rel, NoLock);

	initStringInfo(&sql);
	appendStringInfo(&sql, "DROP TRIGGER IF EXISTS " FENCE_TRIGGER_NAME " ON %s",
					 qualified);

	run_trigger_ddl(sql.data);

	PG_RETURN_VOID();
}
