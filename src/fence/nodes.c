/*-------------------------------------------------------------------------
 *
 * nodes.c
 *		Which ModifyTable node of the running query fired a row trigger.
 *
 * A row trigger is not told which ModifyTable node fired it.  A MERGE
 * tells its row triggers the union of the columns that all of its UPDATE
 * actions assign, not those of the action that fired, and an UPDATE that
 * moves a row to another partition fires a DELETE and an INSERT trigger
 * that look like any other: reject_stale() finds the node in the running
 * query's executor state (base/statement.c knows the query), in memory.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/fence/nodes.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/trigger.h"
#include "executor/execdesc.h"
#include "nodes/execnodes.h"

#include "fence/fence.h"

/*
 * Whether the trigger manager fired trigger for result relation rri: it
 * passes a pointer into the ResultRelInfo's own copy of the relation's
 * triggers.
 */
static bool
fence_fired_for(ResultRelInfo *rri, Trigger *trigger)
{
	TriggerDesc *trigdesc = rri->ri_TrigDesc;
	int			i;

	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
	{
		if (&trigdesc->triggers[i] == trigger)
			return true;
	}
	return false;
}

/*
 * Whether trigger was fired for one of node's own result relations.
 */
static bool
fence_fired_by_node(ModifyTableState *node, Trigger *trigger)
{
	int			i;

	for (i = 0; i < node->mt_nrels; i++)
	{
		if (fence_fired_for(&node->resultRelInfo[i], trigger))
			return true;
	}
	return false;
}

/*
 * The n-th ModifyTable node of query, or NULL past the last: its main node
 * (a query with writable CTEs may have none) and those of its writable
 * CTEs.
 */
ModifyTableState *
fencing_fence_query_node(QueryDesc *query, int n)
{
	List	   *ctes = query->estate->es_auxmodifytables;

	if (query->planstate != NULL && IsA(query->planstate, ModifyTableState))
	{
		if (n == 0)
			return (ModifyTableState *) query->planstate;
		n--;
	}
	return n < list_length(ctes) ? (ModifyTableState *) list_nth(ctes, n) : NULL;
}

/*
 * The ModifyTable node of the running query that fired trigger, or NULL
 * when none did (a utility statement's trigger, such as COPY's).  A node
 * writes its own result relations, and the partitions it routes rows to,
 * whose ResultRelInfo names the node's root one.  Not for every row: it
 * walks the query's result relations.
 */
ModifyTableState *
fencing_fence_firing_node(Trigger *trigger)
{
	QueryDesc  *query = fencing_running_query();
	ModifyTableState *node;
	ListCell   *lc;
	int			n;

	if (query == NULL || query->estate == NULL)
		return NULL;
	for (n = 0; (node = fencing_fence_query_node(query, n)) != NULL; n++)
	{
		if (fence_fired_by_node(node, trigger))
			return node;
	}
	foreach(lc, query->estate->es_tuple_routing_result_relations)
	{
		ResultRelInfo *rri = (ResultRelInfo *) lfirst(lc);

		if (!fence_fired_for(rri, trigger))
			continue;
		for (n = 0; (node = fencing_fence_query_node(query, n)) != NULL; n++)
		{
			if (rri->ri_RootResultRelInfo == node->rootResultRelInfo)
				return node;
		}
	}
	return NULL;
}
