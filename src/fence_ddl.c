/*-------------------------------------------------------------------------
 *
 * fence_ddl.c
 *		DDL that would open a protected table to unfenced writes: seen by
 *		the utility hook of statement_hooks.c before and after it runs.
 *
 * Row triggers see every row change except those that DDL makes, and DDL
 * can change what the trigger sees.  A table attached to a protected table
 * by inheritance is written through its parent without the parent's
 * triggers: after CREATE TABLE ... INHERITS or PARTITION OF and ALTER TABLE
 * ... INHERIT or ATTACH PARTITION, fence_protect.c makes the new children
 * follow the parent's fence, or the DDL fails.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence_ddl.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "nodes/parsenodes.h"

#include "fencing.h"

/*
 * Before a utility statement runs.
 */
void
fencing_fence_utility_before(PlannedStmt *pstmt)
{
}

/*
 * After a utility statement ran: the parents it may have given children,
 * resolved as the statement resolved them (inside CREATE SCHEMA, with the
 * new schema first in the path, as the statement saw it).  Every other
 * statement, a SET LOCAL fencing.token among them, costs a tag test.
 */
void
fencing_fence_utility_after(PlannedStmt *pstmt)
{
	Node	   *stmt = pstmt->utilityStmt;
	List	   *parents = NIL;
	ListCell   *lc;

	switch (nodeTag(stmt))
	{
		case T_CreateStmt:
			parents = ((CreateStmt *) stmt)->inhRelations;
			break;
		case T_CreateForeignTableStmt:
			parents = ((CreateForeignTableStmt *) stmt)->base.inhRelations;
			break;
		case T_AlterTableStmt:
			foreach(lc, ((AlterTableStmt *) stmt)->cmds)
			{
				AlterTableCmd *cmd = (AlterTableCmd *) lfirst(lc);

				if (cmd->subtype == AT_AddInherit)
					parents = lappend(parents, cmd->def);
				else if (cmd->subtype == AT_AttachPartition)
					parents = lappend(parents, ((AlterTableStmt *) stmt)->relation);
			}
			break;
		default:
			return;
	}

	if (parents == NIL)
		return;

	/* make the statement's pg_inherits rows visible to the catalog scans */
	CommandCounterIncrement();
	foreach(lc, parents)
	{
		Oid			parentid = RangeVarGetRelid((RangeVar *) lfirst(lc), NoLock, true);

		if (OidIsValid(parentid))
			fencing_follow_new_children(parentid);
	}
}
