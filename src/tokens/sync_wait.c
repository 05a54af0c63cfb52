/*-------------------------------------------------------------------------
 *
 * sync_wait.c
 *		The wait for synchronous standbys of a reservation, or of the end of
 *		a lease: as a commit waits, but without the words core has for a
 *		commit.
 *
 * A reservation's WAL record must reach the synchronous standbys before
 * its tokens are handed out, so that a failover to one of them cannot hand
 * them out again (T2).  Core's SyncRepWaitForLSN does the waiting; what it
 * says when the wait is cancelled is written for a commit, which a
 * reservation is not, and is kept from the client and the server log.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/tokens/sync_wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/lwlock.h"
#include "tcop/tcopprot.h"
#include "utils/elog.h"
#include "utils/guc.h"

#include "tokens/tokens.h"

/*
 * While a reservation waits in core's SyncRepWaitForLSN: the log hook it
 * replaced.  A cancel or a termination request ends that wait with a
 * WARNING written for a commit ("The transaction has already committed
 * locally, but might not have been replicated to the standby"), which is
 * false of a reservation: no transaction committed, and the caller gets
 * an error and no token instead.
 */
static emit_log_hook_type sync_wait_prev_emit_log_hook = NULL;

/*
 * Keep that WARNING out of the server log during the wait (the client is
 * kept from it by client_min_messages, see fencing_wait_for_sync_standbys);
 * every other report passes on.
 */
static void
sync_wait_emit_log(ErrorData *edata)
{
	if (edata->elevel == WARNING && edata->funcname != NULL &&
		strcmp(edata->funcname, "SyncRepWaitForLSN") == 0)
	{
		edata->output_to_server = false;
		return;
	}
	if (sync_wait_prev_emit_log_hook)
		sync_wait_prev_emit_log_hook(edata);
}

/*
 * Core's wait for synchronous standbys, without its words for a commit:
 * client_min_messages = error for the wait keeps its WARNING from the
 * client (the log hook, from the server log), and the output core turns
 * off when a termination request ends the wait (a commit must not look
 * failed to its client) is turned on again, so that the client of a
 * reservation learns why its session ends.  The caller has made a GUC
 * nesting level.
 */
static void
sync_rep_wait_quietly(XLogRecPtr lsn)
{
	CommandDest dest = whereToSendOutput;

	(void) set_config_option("client_min_messages", "error",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	sync_wait_prev_emit_log_hook = emit_log_hook;
	emit_log_hook = sync_wait_emit_log;
	PG_TRY();
	{
		HOLD_INTERRUPTS();
		SyncRepWaitForLSN(lsn, false);
		RESUME_INTERRUPTS();
	}
	PG_FINALLY();
	{
		emit_log_hook = sync_wait_prev_emit_log_hook;
	}
	PG_END_TRY();

	if (ProcDiePending && whereToSendOutput == DestNone)
		whereToSendOutput = dest;
}

/*
 * Wait, like a commit, until synchronous standbys have flushed the record
 * at lsn: a reservation's, so a token is never handed out that a failover
 * to a synchronous standby could hand out again, or the end of a lease,
 * so nobody is told it ended before a failover would know.  what names the
 * record in the error a cancelled wait raises, and detail says what the
 * caller did not get.  A session's own
 * synchronous_commit = off or local must not weaken a cluster-wide
 * guarantee, so the wait is at least remote_flush whatever the session says.
 *
 * Whether synchronous standbys are defined is read from
 * synchronous_standby_names, as core's SyncStandbysDefined() does, not from
 * WalSndCtl's flags (whose layout differs between 15.x minor releases);
 * WalSndCtl->lsn[] is read, which every 15.x release lays out alike.
 * SyncRepWaitForLSN returns when the wait is cancelled (having consumed the
 * cancel), and at once while the checkpointer has not yet seen a new
 * setting; if the standbys did not confirm the record we raise an error,
 * so the caller gets no token.  A termination request ends the session
 * once the wait has returned.
 */
void
fencing_wait_for_sync_standbys(XLogRecPtr lsn, const char *what,
							   const char *detail)
{
	int			nestlevel;
	XLogRecPtr	confirmed;

	if (max_wal_senders == 0 ||
		SyncRepStandbyNames == NULL || SyncRepStandbyNames[0] == '\0')
		return;

	nestlevel = NewGUCNestLevel();
	if (synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_FLUSH)
		(void) set_config_option("synchronous_commit", "on",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	sync_rep_wait_quietly(lsn);
	AtEOXact_GUC(true, nestlevel);

	/* A terminate request during the wait ends the session here. */
	CHECK_FOR_INTERRUPTS();

	LWLockAcquire(SyncRepLock, LW_SHARED);
	confirmed = WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH];
	LWLockRelease(SyncRepLock);

	/*
	 * Core also ends the wait when synchronous_standby_names is emptied: the
	 * operator no longer asks for synchronous standbys, and core's commits
	 * go through then.  This backend learns of the change only by reading
	 * the configuration it has been signalled to reload; a reservation
	 * behaves like a commit, so with no synchronous standby named any more
	 * it needs no confirmation either.
	 */
	if (confirmed < lsn && ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
		if (SyncRepStandbyNames == NULL || SyncRepStandbyNames[0] == '\0')
			return;
	}

	if (confirmed < lsn)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("canceling wait for synchronous standbys to confirm %s", what),
				 errdetail("%s It is flushed locally but not yet confirmed by the synchronous standbys listed in synchronous_standby_names.",
						   detail),
				 errhint("Bring a synchronous standby back, or change synchronous_standby_names; the next call waits again.")));
}
