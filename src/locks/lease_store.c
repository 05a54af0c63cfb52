/*-------------------------------------------------------------------------
 *
 * lease_store.c
 *		Leases across restarts, crashes and failovers: their WAL records,
 *		redo, the state file $PGDATA/fencing.leases, the "fencing lease
 *		keeper" background worker, the ends of leases and the start of
 *		service.
 *
 * Every change of a lease (acquisition, renewal, release, break, an end
 * noted, a drop) is a small WAL record of fencing's resource manager,
 * numbered (seq) and inserted with no flush and no transaction id.  A
 * standby's redo applies the records to its own table, so a promoted
 * standby knows the leases; crash recovery does the same on the primary.
 * An entry remembers the number of its last change, and redo applies a
 * record only to an entry that is older, so that nothing goes back.
 *
 * Crash recovery starts at the last checkpoint's redo point and there is
 * no checkpoint hook, so a change whose record is older than that point
 * must be in the state file.  The file has a slot per entry of the table:
 * the keeper writes the slots of the entries changed since its last write
 * (the dirty ring), one slot each, at most every LEASE_FILE_INTERVAL_MS,
 * after flushing WAL up to their records (WAL first, as for a data page),
 * then fsyncs; file_seq then says that every change up to the number it
 * read before the write is on disk.  The postmaster writes the slots once
 * more when it lets go of shared memory (at every stop and at a crash
 * restart), from the table as it was, without the lock.
 *
 * So a change is on disk within the keeper's pace and an fsync, and may be
 * lost if the postmaster dies before (SIGKILL, power loss): then its lease
 * is lost (the holder's next renewal raises FN004) or a released one
 * reappears until its ttl passes.  That is availability.  The end of a
 * lease is not left to that: before anyone is told a lease ended (FN004,
 * the token break_lease returns, a lock-delay cleared), the caller makes
 * the changes of the lease's filter bucket durable itself
 * (fencing_lease_make_durable): in the file, WAL flushed, and confirmed by
 * the synchronous standbys as a commit is.  A restart, crash restart or
 * promotion then finds the lease ended, and an ended lease is never
 * renewed, used or carried over again.  A damaged file is logged and the
 * server starts without leases.
 *
 * When a server starts serving (a clean start, after crash recovery, at
 * promotion), every lease that was live at the last moment its state is
 * known to have held counts as renewed then: expires_at = now + its ttl,
 * as etcd extends leases on a leader change; a lease already lapsed at
 * that moment ends.  That moment is the newest of: the file's (the time of
 * its last write, or at a stop the time of the stop), the newest record's,
 * the last transaction replayed, and on a standby the last message from
 * its primary while it streamed.  The keeper does this as soon as recovery
 * has ended; every lease function and grant-path check that finds the
 * table not yet serving does it first.
 *
 * On the primary the keeper also notes each lapse when it happens (counted
 * in fencing.stats, written to WAL so that standbys learn the moment) and
 * drops the entries whose lock-delay has ended, the soonest first from
 * the table's heaps, without a pass over the table.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/locks/lease_store.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_crc32c.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/walreceiver.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "locks/locks.h"

PGDLLEXPORT void fencing_lease_keeper_main(Datum main_arg);

#define LEASE_FILE			"fencing.leases"
#define LEASE_FILE_TMP		"fencing.leases.tmp"
#define LEASE_FILE_MAGIC	0x464E4C53	/* "FNLS" */
#define LEASE_FILE_VERSION	2
#define LEASE_SLOT_USED		0x55534544	/* "USED" */

/*
 * The keeper's pace: files at least this far apart, sweeps too (a stream of
 * lapses must not make it take the lock at every one), and its idle sleeps.
 */
#define LEASE_FILE_INTERVAL_MS		20
#define LEASE_SWEEP_INTERVAL_MS		20
#define LEASE_RECOVERY_POLL_MS		250
#define LEASE_KEEPER_MAX_SLEEP_MS	10000

/* Slots copied under the lock at a time, and ends noted per lock hold. */
#define LEASE_FLUSH_CHUNK			256
#define LEASE_SWEEP_CHUNK			1024

/*
 * A record: the change's number and moment, then the lease up to its name,
 * then namelen bytes of name and holderlen (if positive) bytes of holder.
 * PUT stores the lease; DROP removes it if it still has that token.
 */
typedef struct xl_fencing_lease
{
	uint64		seq;
	TimestampTz at;
	LeaseData	lease;
} xl_fencing_lease;

#define SizeOfLeaseRecordHeader	offsetof(xl_fencing_lease, lease.name)

/*
 * The file: this header in the first LEASE_FILE_HEADER_BYTES, then
 * capacity slots, slot i the state of entry i.  seq is the highest change
 * number the file has seen, last_known the moment of its last write.
 */
typedef struct LeaseFileHeader
{
	uint32		magic;
	uint32		version;
	uint32		capacity;
	uint32		slot_size;
	uint64		seq;
	TimestampTz last_known;
	pg_crc32c	crc;			/* of the header up to crc */
} LeaseFileHeader;

#define LEASE_FILE_HEADER_BYTES	512

/* A slot: used or free, the number of its last change, the lease. */
typedef struct LeaseFileSlot
{
	uint32		state;			/* LEASE_SLOT_USED, else free */
	pg_crc32c	crc;			/* of the state and everything after crc */
	uint64		seq;
	LeaseData	data;
} LeaseFileSlot;

/* The file of 1.2: a header and the entries in use, rewritten whole. */
typedef struct LeaseFileHeaderV1
{
	uint32		magic;
	uint32		version;
	uint32		count;
	uint32		entry_size;
	uint64		seq;
	TimestampTz last_known;
	pg_crc32c	crc;			/* of the entries, then the header up to crc */
} LeaseFileHeaderV1;

static void lease_postmaster_exit(int code, Datum arg);
static void lease_keeper_exit(int code, Datum arg);
static void lease_flush_exit(int code, Datum arg);
static const char *lease_identify(uint8 info);
static const char *lease_check_record(XLogReaderState *record);
static void lease_redo(XLogReaderState *record);
static void lease_desc(StringInfo buf, XLogReaderState *record);

/* The lease records, as registered with fencing's resource manager. */
static const FencingWalRecords lease_records = {
	.identify = lease_identify,
	.check = lease_check_record,
	.redo = lease_redo,
	.desc = lease_desc
};

/*
 * Register the lease records with fencing's resource manager, so that redo
 * reaches them, and the keeper; called from _PG_init.  The keeper needs
 * shared memory but no database, and starts with the postmaster, so that
 * it also runs during recovery and on standbys.
 */
void
fencing_lease_store_init(void)
{
	BackgroundWorker worker;

	fencing_wal_register_records(&lease_records);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, sizeof(worker.bgw_library_name), "fencing");
	snprintf(worker.bgw_function_name, sizeof(worker.bgw_function_name),
			 "fencing_lease_keeper_main");
	snprintf(worker.bgw_name, sizeof(worker.bgw_name), "fencing lease keeper");
	snprintf(worker.bgw_type, sizeof(worker.bgw_type), "fencing lease keeper");
	RegisterBackgroundWorker(&worker);
}

/*
 * WAL.
 */

/*
 * Number a change and write its record; returns the number, which the
 * caller stores with the entry (fencing_lease_put or _remove).  The caller
 * holds the table's lock exclusively and is on a primary, and calls
 * fencing_lease_changed() once it let go of the lock.
 *
 * The record needs no flush at the end of the caller's transaction: the
 * keeper flushes it before it writes the entry's slot, and whoever is
 * told a lease ended has it flushed first.  So the transaction's own end
 * of WAL (XactLastRecEnd) is put back as it was, and a transaction that
 * wrote nothing else ends as if it had written no WAL (asking the WAL
 * writer at every commit to flush would cost a lease as much as the rest
 * of its work).  A transaction that goes on writing moves XactLastRecEnd
 * past the record anyway.
 */
uint64
fencing_lease_log(uint8 info, const LeaseData *data, TimestampTz at)
{
	LeaseTable *table = fencing_lease_table;
	xl_fencing_lease rec;
	XLogRecPtr	xact_last_rec_end = XactLastRecEnd;
	uint32		bucket = fencing_lease_bucket(data->dboid, data->key);

	rec.seq = ++table->seq;
	rec.at = at;
	memcpy(&rec.lease, data, offsetof(LeaseData, name));

	XLogBeginInsert();
	XLogSetRecordFlags(XLOG_MARK_UNIMPORTANT);
	XLogRegisterData((char *) &rec, SizeOfLeaseRecordHeader);
	XLogRegisterData((char *) data->name, data->namelen);
	if (data->holderlen > 0)
		XLogRegisterData((char *) data->holder, data->holderlen);
	table->last_lsn = XLogInsert(FENCING_RMGR_ID, info);
	XactLastRecEnd = xact_last_rec_end;

	table->bucket_seq[bucket] = rec.seq;
	table->bucket_lsn[bucket] = table->last_lsn;
	return rec.seq;
}

/*
 * After a change: wake the keeper to write the file, unless an earlier
 * change since its last write already did.
 */
void
fencing_lease_changed(void)
{
	Latch	   *keeper = fencing_lease_table->keeper_latch;

	if (keeper != NULL &&
		pg_atomic_read_u32(&fencing_lease_table->keeper_wanted) == 0 &&
		pg_atomic_exchange_u32(&fencing_lease_table->keeper_wanted, 1) == 0)
		SetLatch(keeper);
}

/*
 * Check a lease record before redo or desc reads it.  NULL when valid,
 * else a sentence saying what is wrong (rmgr.c reports it).
 */
static const char *
lease_check_record(XLogReaderState *record)
{
	uint32		len = XLogRecGetDataLen(record);
	xl_fencing_lease rec;
	uint32		expected;

	if (XLogRecHasAnyBlockRefs(record))
		return pstrdup("It references data blocks; a fencing lease record references none.");
	if (len < SizeOfLeaseRecordHeader)
		return psprintf("It carries %u bytes of data; a fencing lease record carries at least %d.",
						len, (int) SizeOfLeaseRecordHeader);
	memcpy(&rec, XLogRecGetData(record), SizeOfLeaseRecordHeader);
	if (rec.lease.namelen < 1 || rec.lease.namelen > FENCING_NAME_MAX_BYTES ||
		rec.lease.holderlen < -1 ||
		rec.lease.holderlen > FENCING_LEASE_HOLDER_MAX_BYTES)
		return psprintf("Its name length %d or holder length %d is out of range.",
						(int) rec.lease.namelen, (int) rec.lease.holderlen);
	expected = SizeOfLeaseRecordHeader + rec.lease.namelen +
		Max(rec.lease.holderlen, 0);
	if (len != expected)
		return psprintf("It carries %u bytes of data; its lengths say %u.",
						len, expected);
	if (rec.lease.token < 1)
		return psprintf("Its token " INT64_FORMAT " was never issued.",
						rec.lease.token);
	if ((rec.lease.flags & ~LEASE_FLAGS_KNOWN) != 0)
		return psprintf("Its flags 0x%02x are not a lease's.", rec.lease.flags);
	return NULL;
}

/* A record checked by lease_check_record(), whole. */
static void
lease_record_read(XLogReaderState *record, xl_fencing_lease *rec)
{
	const char *data = XLogRecGetData(record);

	memset(rec, 0, sizeof(*rec));
	memcpy(rec, data, SizeOfLeaseRecordHeader);
	data += SizeOfLeaseRecordHeader;
	memcpy(rec->lease.name, data, rec->lease.namelen);
	data += rec->lease.namelen;
	if (rec->lease.holderlen > 0)
		memcpy(rec->lease.holder, data, rec->lease.holderlen);
	/* a broken lease of 1.2 carries no end: a break is one */
	if (rec->lease.flags & LEASE_FLAG_BROKEN)
		rec->lease.flags |= LEASE_FLAG_ENDED;
}

/*
 * A standby whose table is full meets a new lease: drop an ended entry, or
 * if none is (this server's fencing.max_leases is below the primary's) the
 * live one that expires soonest, and say so.  Exclusive lock held.
 */
static void
lease_redo_make_room(uint64 seq)
{
	int			entry = fencing_lease_heap_top(LEASE_HEAP_ENDED);

	if (entry < 0)
	{
		entry = fencing_lease_heap_top(LEASE_HEAP_LIVE);
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("fencing lease \"%.*s\" is dropped: the lease table of this server is full",
						(int) fencing_lease_entries[entry].data.namelen,
						fencing_lease_entries[entry].data.name),
				 errdetail("All %d entries of fencing.max_leases hold leases the primary still holds.",
						   fencing_lease_table->capacity),
				 errhint("Set fencing.max_leases on this server to at least the primary's value (it takes effect at server restart).")));
	}
	fencing_lease_remove(entry, seq);
}

/*
 * Redo a lease record, on a standby or in crash recovery: apply it unless
 * the entry already holds a later change (from the state file).
 */
static void
lease_redo(XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
	LeaseTable *table = fencing_lease_table;
	xl_fencing_lease rec;
	int			i;

	lease_record_read(record, &rec);

	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	if (rec.seq > table->seq)
		table->seq = rec.seq;
	if (rec.at > table->last_known)
		table->last_known = rec.at;
	i = fencing_lease_find(rec.lease.dboid, rec.lease.key);
	if (rec.seq <= table->file_covered ||
		(i >= 0 && fencing_lease_entries[i].seq >= rec.seq))
		;						/* the file or the entry is newer */
	else if (info == XLOG_FENCING_LEASE_PUT)
	{
		if (i < 0 && table->nfree == 0)
			lease_redo_make_room(rec.seq);
		(void) fencing_lease_put(i, &rec.lease, rec.seq);
	}
	else if (i >= 0 && fencing_lease_entries[i].data.token == rec.lease.token)
		fencing_lease_remove(i, rec.seq);
	LWLockRelease(table->lock);

	fencing_lease_changed();
}

/*
 * Describe a lease record, for pg_waldump and redo's error context; rmgr.c
 * has checked it.
 */
static void
lease_desc(StringInfo buf, XLogReaderState *record)
{
	xl_fencing_lease rec;

	lease_record_read(record, &rec);
	appendStringInfo(buf, "seq " UINT64_FORMAT " lease \"%.*s\" database %u token " INT64_FORMAT " expires %s%s%s",
					 rec.seq, (int) rec.lease.namelen, rec.lease.name,
					 rec.lease.dboid, rec.lease.token,
					 timestamptz_to_str(rec.lease.expires_at),
					 (rec.lease.flags & LEASE_FLAG_ENDED) ? " ended" : "",
					 (rec.lease.flags & LEASE_FLAG_BROKEN) ? " broken" : "");
}

/* Name a lease record type; NULL for a code that is not a lease's. */
static const char *
lease_identify(uint8 info)
{
	switch (info)
	{
		case XLOG_FENCING_LEASE_PUT:
			return "LEASE_PUT";
		case XLOG_FENCING_LEASE_DROP:
			return "LEASE_DROP";
	}
	return NULL;
}

/*
 * Ends.
 */

/*
 * Note the end of entry's lease at now, once: it lapsed (now is at or past
 * its expiry), and no renewal, use or start of service takes it back.
 * Counted, with the delay it starts, and written to WAL so that standbys
 * learn it.  Exclusive lock held; on a primary only.  A break notes its
 * own end.
 */
void
fencing_lease_note_end(int entry, TimestampTz now)
{
	LeaseData	data = fencing_lease_entries[entry].data;

	Assert(!RecoveryInProgress());
	if (fencing_lease_ended(&data))
		return;
	data.flags |= LEASE_FLAG_ENDED;
	(void) fencing_lease_put(entry, &data,
							 fencing_lease_log(XLOG_FENCING_LEASE_PUT, &data, now));
	fencing_stat_add(FENCING_STAT_LEASES_LAPSED, 1);
	if (fencing_lock_delay_ms() > 0)
		fencing_stat_add(FENCING_STAT_DELAYS_STARTED, 1);
}

/*
 * Note the end of up to limit leases whose ttl has passed, the soonest
 * first, and drop up to limit entries whose lock-delay is over.  Returns
 * how many it did of either; the caller may let go of the lock and call
 * again.  Exclusive lock held; on a primary only.
 */
int
fencing_lease_lapse_due(TimestampTz now, int limit)
{
	int			done = 0;
	int			delay_ms = fencing_lock_delay_ms();
	int			e;

	while (done < limit && (e = fencing_lease_heap_top(LEASE_HEAP_LIVE)) >= 0 &&
		   fencing_lease_entries[e].data.expires_at <= now)
	{
		fencing_lease_note_end(e, now);
		done++;
	}
	while (done < limit && (e = fencing_lease_heap_top(LEASE_HEAP_ENDED)) >= 0 &&
		   TimestampTzPlusMilliseconds(fencing_lease_entries[e].data.expires_at,
									   delay_ms) <= now)
	{
		LeaseData	data = fencing_lease_entries[e].data;

		fencing_lease_remove(e, fencing_lease_log(XLOG_FENCING_LEASE_DROP,
												  &data, now));
		done++;
	}
	return done;
}

/*
 * The soonest moment after now at which an entry changes state (a lapse,
 * the end of a delay), or 0 when none will.  Lock held.
 */
TimestampTz
fencing_lease_next_event(TimestampTz now)
{
	int			live = fencing_lease_heap_top(LEASE_HEAP_LIVE);
	int			ended = fencing_lease_heap_top(LEASE_HEAP_ENDED);
	TimestampTz next = 0;

	if (live >= 0)
		next = fencing_lease_entries[live].data.expires_at;
	if (ended >= 0)
	{
		TimestampTz gone = TimestampTzPlusMilliseconds(fencing_lease_entries[ended].data.expires_at,
													   fencing_lock_delay_ms());

		if (next == 0 || gone < next)
			next = gone;
	}
	return next == 0 ? 0 : Max(next, now);
}

/*
 * The start of service.
 */

/*
 * The last moment at which the primary is known to have been alive, from
 * outside the table: the last transaction replayed.  0 when none is known.
 * (On a standby the keeper also keeps the send time of the primary's last
 * message in last_known: lease_note_primary_heard.)
 */
static TimestampTz
lease_last_heard(void)
{
	return GetLatestXTime();
}

/*
 * On a standby, while its walreceiver streams: the send time of the
 * primary's last message is a moment at which the primary was alive, kept
 * in last_known for the start of service at promotion.  Read only while
 * streaming: a walreceiver that starts (also one that retries a primary
 * that is gone) sets that time to its own clock, which says nothing of the
 * primary, and a promotion slower than a lease's ttl would then take live
 * leases for lapsed ones.
 */
static void
lease_note_primary_heard(void)
{
	WalRcvState state;
	TimestampTz sent;

	if (WalRcv == NULL)
		return;
	SpinLockAcquire(&WalRcv->mutex);
	state = WalRcv->walRcvState;
	sent = WalRcv->lastMsgSendTime;
	SpinLockRelease(&WalRcv->mutex);
	if (state != WALRCV_STREAMING || sent <= fencing_lease_table->last_known)
		return;
	LWLockAcquire(fencing_lease_table->lock, LW_EXCLUSIVE);
	if (sent > fencing_lease_table->last_known)
		fencing_lease_table->last_known = sent;
	LWLockRelease(fencing_lease_table->lock);
}

/*
 * The entries in use, as a palloc'd array of entry numbers (*count set):
 * the two heaps hold them all.  Lock held.
 */
static int *
lease_entries_in_use(int *count)
{
	int		   *entries = palloc(sizeof(int) * Max(fencing_lease_table->count, 1));
	int			heap;
	int			pos;
	int			e;

	*count = 0;
	for (heap = LEASE_HEAP_LIVE; heap <= LEASE_HEAP_ENDED; heap++)
		for (pos = 0; (e = fencing_lease_heap_entry(heap, pos)) >= 0; pos++)
			entries[(*count)++] = e;
	return entries;
}

/*
 * The server has just started serving: every lease live at the last known
 * moment is renewed from now for its ttl (a live holder could not renew
 * while no server ran), the others have ended.  An ended lease whose
 * lock-delay still runs stays in the table; those whose delay is over are
 * dropped.
 */
static void
lease_start_serving(void)
{
	LeaseTable *table = fencing_lease_table;
	TimestampTz heard = lease_last_heard();
	TimestampTz now;
	int			delay_ms = fencing_lock_delay_ms();
	int		   *entries;
	int			count;
	int			kept = 0;
	int			ended = 0;
	int			i;

	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	if (table->serving)
	{
		LWLockRelease(table->lock);
		return;
	}
	now = GetCurrentTimestamp();
	heard = Max(heard, table->last_known);
	entries = lease_entries_in_use(&count);
	for (i = 0; i < count; i++)
	{
		int			e = entries[i];
		LeaseData	data = fencing_lease_entries[e].data;

		if (fencing_lease_ended(&data) || data.expires_at <= heard)
		{
			ended++;
			fencing_lease_note_end(e, now);
			if (TimestampTzPlusMilliseconds(data.expires_at, delay_ms) <= now)
				fencing_lease_remove(e, fencing_lease_log(XLOG_FENCING_LEASE_DROP,
														  &data, now));
			continue;
		}
		data.renewed_at = now;
		data.expires_at = TimestampTzPlusMilliseconds(now, data.span_ms);
		(void) fencing_lease_put(e, &data,
								 fencing_lease_log(XLOG_FENCING_LEASE_PUT, &data, now));
		kept++;
	}
	/*
	 * What changed before the start (redo, the file) is not known bucket by
	 * bucket: whoever tells an end first waits for all of it, in the file
	 * and at the synchronous standbys.
	 */
	for (i = 0; i < FENCING_LEASE_FILTER_SIZE; i++)
	{
		table->bucket_seq[i] = table->seq;
		table->bucket_lsn[i] = GetXLogInsertRecPtr();
	}
	table->serving = true;
	LWLockRelease(table->lock);
	pfree(entries);

	fencing_lease_changed();
	if (kept + ended > 0)
		ereport(LOG,
				(errmsg("fencing: %d leases carried over into this server's service, each renewed for its ttl; %d had ended before",
						kept, ended),
				 errdetail("The leases' state was last known at %s.",
						   timestamptz_to_str(heard))));
}

/*
 * Before any use of the table on a primary: make sure the start of service
 * has happened.  One read of a flag once it has.
 */
void
fencing_lease_ensure_serving(void)
{
	if (likely(fencing_lease_table->serving) || RecoveryInProgress())
		return;
	lease_start_serving();
}

/*
 * The state file.
 */

/* The offset of slot i in the file. */
static inline off_t
lease_slot_offset(int i)
{
	return (off_t) LEASE_FILE_HEADER_BYTES + (off_t) i * sizeof(LeaseFileSlot);
}

/* The CRC of a header up to its crc field. */
static pg_crc32c
lease_header_crc(const LeaseFileHeader *header)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, header, offsetof(LeaseFileHeader, crc));
	FIN_CRC32C(crc);
	return crc;
}

/* The CRC of a slot: its state, and everything after its crc field. */
static pg_crc32c
lease_slot_crc(const LeaseFileSlot *slot)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, &slot->state, sizeof(slot->state));
	COMP_CRC32C(crc, &slot->seq, sizeof(LeaseFileSlot) - offsetof(LeaseFileSlot, seq));
	FIN_CRC32C(crc);
	return crc;
}

/* Fill in a slot for an entry as it is (in use or free). */
static void
lease_slot_fill(LeaseFileSlot *slot, const Lease *lease)
{
	memset(slot, 0, sizeof(*slot));
	slot->seq = lease->seq;
	if (lease->in_use)
	{
		slot->state = LEASE_SLOT_USED;
		slot->data = lease->data;
	}
	slot->crc = lease_slot_crc(slot);
}

/* A header of this server's table. */
static void
lease_header_fill(LeaseFileHeader *header, uint64 seq, TimestampTz last_known)
{
	memset(header, 0, sizeof(*header));
	header->magic = LEASE_FILE_MAGIC;
	header->version = LEASE_FILE_VERSION;
	header->capacity = fencing_lease_table->capacity;
	header->slot_size = sizeof(LeaseFileSlot);
	header->seq = seq;
	header->last_known = last_known;
	header->crc = lease_header_crc(header);
}

/* Write len bytes at offset, or report at elevel; whether it went. */
static bool
lease_file_pwrite(int fd, const void *buf, size_t len, off_t offset, int elevel)
{
	errno = 0;
	if (pg_pwrite(fd, buf, len, offset) == (ssize_t) len)
		return true;
	if (errno == 0)
		errno = ENOSPC;
	ereport(elevel,
			(errcode_for_file_access(),
			 errmsg("could not write file \"%s\": %m", LEASE_FILE),
			 errdetail("The fencing lease changes not yet in it are only in WAL.")));
	return false;
}

/* Open the file for writing its slots, or report at elevel. */
static int
lease_file_open(int elevel)
{
	int			fd = OpenTransientFile(LEASE_FILE, O_RDWR | O_CREAT | PG_BINARY);

	if (fd < 0)
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", LEASE_FILE),
				 errdetail("The fencing lease changes not yet in it are only in WAL.")));
	return fd;
}

/* Write the header and fsync the file; whether it went. */
static bool
lease_file_finish(int fd, uint64 seq, TimestampTz last_known, int elevel)
{
	LeaseFileHeader header;

	lease_header_fill(&header, seq, last_known);
	if (!lease_file_pwrite(fd, &header, sizeof(header), 0, elevel))
		return false;
	if (pg_fdatasync(fd) != 0)
	{
		ereport(data_sync_elevel(elevel),
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", LEASE_FILE)));
		return false;
	}
	return true;
}

/*
 * The moment up to which the table is known to hold: now once the server
 * serves (it has been watching the clock), else the newest moment learnt.
 */
static TimestampTz
lease_known_moment(void)
{
	return fencing_lease_table->serving ? GetCurrentTimestamp() : fencing_lease_table->last_known;
}

/*
 * Put the entries a failed write took out of the dirty ring back into it,
 * so that the next write writes them.
 */
static void
lease_file_retake(const int *taken, int ntaken)
{
	int			i;

	LWLockAcquire(fencing_lease_table->lock, LW_EXCLUSIVE);
	for (i = 0; i < ntaken; i++)
		fencing_lease_dirty_again(taken[i]);
	LWLockRelease(fencing_lease_table->lock);
}

/*
 * Take up to max entries out of the dirty ring into taken (their slots into
 * slots) and return how many; *lsn is the newest record then, which WAL
 * must be flushed to before the slots are written.
 */
static int
lease_file_take(int *taken, LeaseFileSlot *slots, int max, XLogRecPtr *lsn)
{
	int			n = 0;

	LWLockAcquire(fencing_lease_table->lock, LW_EXCLUSIVE);
	while (n < max && (taken[n] = fencing_lease_dirty_pop()) >= 0)
	{
		lease_slot_fill(&slots[n], &fencing_lease_entries[taken[n]]);
		n++;
	}
	*lsn = fencing_lease_table->last_lsn;
	LWLockRelease(fencing_lease_table->lock);
	return n;
}

/*
 * Write to the file every entry that was dirty when this began, and fsync:
 * then every change up to the number read at the start is on disk, which
 * file_seq says.  WAL is flushed up to the records of what each slot gets
 * before it gets it.  The caller holds the right to write the file
 * (lease_flush_begin).  On a failure every entry taken goes back into the
 * ring before the failure is reported at elevel; returns whether it went.
 */
static bool
lease_file_flush(int elevel)
{
	LeaseTable *table = fencing_lease_table;
	LeaseFileSlot *slots = palloc(sizeof(LeaseFileSlot) * LEASE_FLUSH_CHUNK);
	TimestampTz heard = RecoveryInProgress() ? lease_last_heard() : 0;
	TimestampTz known;
	uint64		seq;
	int		   *taken;
	int			ntaken = 0;
	int			todo;
	int			fd;
	int			saved_errno = 0;
	bool		synced = true;

	if ((fd = lease_file_open(elevel)) < 0)
	{
		pfree(slots);
		return false;
	}
	LWLockAcquire(table->lock, LW_SHARED);
	todo = table->dirty_count;
	seq = table->seq;
	known = Max(lease_known_moment(), heard);
	LWLockRelease(table->lock);
	taken = palloc(sizeof(int) * Max(todo, 1));

	while (saved_errno == 0 && ntaken < todo)
	{
		XLogRecPtr	lsn;
		int			n = lease_file_take(&taken[ntaken], slots,
										Min(todo - ntaken, LEASE_FLUSH_CHUNK), &lsn);
		int			j;

		if (n == 0)
			break;
		if (!RecoveryInProgress() && !XLogRecPtrIsInvalid(lsn))
			XLogFlush(lsn);
		for (j = 0; saved_errno == 0 && j < n; j++)
		{
			errno = 0;
			if (pg_pwrite(fd, &slots[j], sizeof(LeaseFileSlot),
						  lease_slot_offset(taken[ntaken + j])) != sizeof(LeaseFileSlot))
				saved_errno = errno != 0 ? errno : ENOSPC;
		}
		ntaken += n;
	}
	if (saved_errno == 0)
	{
		LeaseFileHeader header;

		lease_header_fill(&header, seq, known);
		errno = 0;
		if (pg_pwrite(fd, &header, sizeof(header), 0) != sizeof(header))
			saved_errno = errno != 0 ? errno : ENOSPC;
		else if (pg_fdatasync(fd) != 0)
		{
			saved_errno = errno;
			synced = false;
		}
	}
	CloseTransientFile(fd);
	pfree(slots);

	if (saved_errno != 0)
	{
		lease_file_retake(taken, ntaken);
		pfree(taken);
		errno = saved_errno;
		ereport(synced ? elevel : data_sync_elevel(elevel),
				(errcode_for_file_access(),
				 synced ?
				 errmsg("could not write file \"%s\": %m", LEASE_FILE) :
				 errmsg("could not fsync file \"%s\": %m", LEASE_FILE),
				 errdetail("The fencing lease changes not yet in it are only in WAL; they are written again at the next try.")));
		return false;
	}
	pfree(taken);
	if (seq > pg_atomic_read_u64(&table->file_seq))
		pg_atomic_write_u64(&table->file_seq, seq);
	return true;
}

/*
 * The right to write the file, one process at a time.  Not an LWLock: a
 * writer may wait for disks, and those waiting for it must stay
 * interruptible.  A process that dies with it gives it back on its way
 * out (lease_flush_exit); a crash resets shared memory.
 */
static bool
lease_flush_begin(void)
{
	static bool exit_callback = false;
	uint32		free_mark = 0;

	if (!exit_callback)
	{
		before_shmem_exit(lease_flush_exit, (Datum) 0);
		exit_callback = true;
	}
	return pg_atomic_compare_exchange_u32(&fencing_lease_table->flushing,
										  &free_mark, (uint32) MyProcPid);
}

static void
lease_flush_end(void)
{
	pg_atomic_write_u32(&fencing_lease_table->flushing, 0);
	ConditionVariableBroadcast(&fencing_lease_table->flushed);
}

/* On the way out: give back the right to write the file if we hold it. */
static void
lease_flush_exit(int code, Datum arg)
{
	if (fencing_lease_table != NULL &&
		pg_atomic_read_u32(&fencing_lease_table->flushing) == (uint32) MyProcPid)
		lease_flush_end();
}

/*
 * A backend writes the file itself, holding the right to: a failure is
 * its ERROR, and the right goes back either way.
 */
static pg_noinline void
lease_flush_or_raise(void)
{
	PG_TRY();
	{
		(void) lease_file_flush(ERROR);
	}
	PG_CATCH();
	{
		lease_flush_end();
		PG_RE_THROW();
	}
	PG_END_TRY();
	lease_flush_end();
}

/*
 * What must be durable before a caller tells anyone about the lease on
 * (database, key): every change of its filter bucket so far.  Lock held.
 */
void
fencing_lease_durable_of(Oid dboid, int64 key, LeaseDurable *d)
{
	uint32		bucket = fencing_lease_bucket(dboid, key);

	d->seq = fencing_lease_table->bucket_seq[bucket];
	d->lsn = fencing_lease_table->bucket_lsn[bucket];
}

/*
 * Make the changes d names durable, before the caller tells anyone that a
 * lease ended: in the state file on disk (written here if the keeper has
 * not yet), WAL flushed, and confirmed by the synchronous standbys, so
 * that no restart, crash restart or promotion to a synchronous standby
 * finds the lease live again.  Waits are interruptible.  Lock not held.
 */
void
fencing_lease_make_durable(const LeaseDurable *d)
{
	LeaseTable *table = fencing_lease_table;

	if (pg_atomic_read_u64(&table->file_seq) < d->seq)
	{
		ConditionVariablePrepareToSleep(&table->flushed);
		while (pg_atomic_read_u64(&table->file_seq) < d->seq)
		{
			if (lease_flush_begin())
			{
				lease_flush_or_raise();
				continue;
			}
			(void) ConditionVariableTimedSleep(&table->flushed, 1000,
											   PG_WAIT_EXTENSION);
		}
		ConditionVariableCancelSleep();
	}
	if (!XLogRecPtrIsInvalid(d->lsn))
	{
		XLogFlush(d->lsn);
		fencing_wait_for_sync_standbys(d->lsn, "the end of a fencing lease",
									   "The caller was not told that the lease ended.");
	}
}

/*
 * Reading the file at start.
 */

/* A damaged file loses its leases, but must not keep the server from starting. */
static void
lease_file_damaged(const char *detail)
{
	ereport(WARNING,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("fencing lease file \"%s\" is damaged; its leases are ignored", LEASE_FILE),
			 errdetail_internal("%s", detail),
			 errhint("Holders of leases from before the restart get FN004 at their next renewal and must acquire them again.")));
}

/* Is a lease read from the file one this server could have written? */
static bool
lease_file_entry_valid(const LeaseData *d)
{
	return d->namelen >= 1 && d->namelen <= FENCING_NAME_MAX_BYTES &&
		d->holderlen >= -1 && d->holderlen <= FENCING_LEASE_HOLDER_MAX_BYTES &&
		d->token >= 1 && d->span_ms >= 1 &&
		(d->flags & ~LEASE_FLAGS_KNOWN) == 0;
}

/*
 * Read exactly len bytes at offset; false at a short read (the caller
 * says what is damaged).
 */
static bool
lease_file_pread(int fd, void *buf, size_t len, off_t offset)
{
	return pg_pread(fd, buf, len, offset) == (ssize_t) len;
}

/*
 * Put a lease read from the file into the new table: in entry, its slot,
 * when the file has this table's capacity (every slot its own entry), else
 * (entry -1) in any free entry; false when there is no room.
 */
static bool
lease_file_load(int entry, const LeaseData *data, uint64 seq)
{
	LeaseData	d = *data;
	int			dup;

	if (d.flags & LEASE_FLAG_BROKEN)
		d.flags |= LEASE_FLAG_ENDED;
	dup = fencing_lease_find(d.dboid, d.key);
	if (dup >= 0)
	{
		/* two slots of one name (a write cut short): the later change stands */
		if (fencing_lease_entries[dup].seq >= seq)
			return true;
		fencing_lease_remove(dup, seq);
	}
	if (entry >= 0)
		fencing_lease_load_at(entry, &d, seq);
	else if (fencing_lease_table->nfree > 0)
		(void) fencing_lease_put(-1, &d, seq);
	else
		return false;
	return true;
}

/*
 * The slots of a file of this version; whether every entry went back to
 * its own slot (else the file must be written anew).  *dropped counts
 * those that found no room.
 */
static bool
lease_file_read_slots(int fd, const LeaseFileHeader *header, int *dropped)
{
	LeaseFileSlot *slots = palloc(sizeof(LeaseFileSlot) * LEASE_FLUSH_CHUNK);
	bool		in_place = header->capacity == (uint32) fencing_lease_table->capacity;
	uint32		first;
	int			bad = 0;

	/*
	 * In place, every entry goes to its own slot, not through the free
	 * stack, which fencing_lease_loaded() makes anew: empty until then.
	 */
	if (in_place)
		fencing_lease_table->nfree = 0;

	for (first = 0; first < header->capacity; first += LEASE_FLUSH_CHUNK)
	{
		int			n = Min(LEASE_FLUSH_CHUNK, header->capacity - first);
		ssize_t		got = pg_pread(fd, slots, sizeof(LeaseFileSlot) * n,
								   lease_slot_offset(first));
		int			j;

		/* slots past the end were never written: free */
		n = got > 0 ? got / sizeof(LeaseFileSlot) : 0;
		for (j = 0; j < n; j++)
		{
			LeaseFileSlot *slot = &slots[j];

			if (slot->seq > fencing_lease_table->seq)
				fencing_lease_table->seq = slot->seq;
			if (slot->state != LEASE_SLOT_USED)
				continue;
			if (!EQ_CRC32C(lease_slot_crc(slot), slot->crc) ||
				!lease_file_entry_valid(&slot->data))
			{
				bad++;
				continue;
			}
			if (!lease_file_load(in_place ? (int) (first + j) : -1,
								 &slot->data, slot->seq))
				(*dropped)++;
		}
		if (n < Min(LEASE_FLUSH_CHUNK, (int) (header->capacity - first)))
			break;
	}
	pfree(slots);
	if (bad > 0)
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("%d slots of the fencing lease file \"%s\" are damaged; their leases are ignored",
						bad, LEASE_FILE),
				 errhint("Holders of those leases get FN004 at their next renewal and must acquire them again.")));
	return in_place;
}

/*
 * The entries of a file of 1.2 (a header and the entries in use, with a
 * CRC over all of them).  Always written anew in this version's form.
 */
static void
lease_file_read_v1(int fd, int *dropped)
{
	LeaseFileHeaderV1 header;
	LeaseData  *entries;
	Size		size;
	pg_crc32c	crc;
	uint32		i;

	if (!lease_file_pread(fd, &header, sizeof(header), 0) ||
		header.entry_size != sizeof(LeaseData) ||
		header.count > (uint32) MaxAllocSize / sizeof(LeaseData))
	{
		lease_file_damaged("Its header is not one of fencing 1.2.");
		return;
	}
	size = mul_size(header.count, sizeof(LeaseData));
	entries = palloc(Max(size, 1));
	if (!lease_file_pread(fd, entries, size, sizeof(header)))
	{
		lease_file_damaged("The file is shorter than its entries.");
		return;
	}
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, entries, size);
	COMP_CRC32C(crc, &header, offsetof(LeaseFileHeaderV1, crc));
	FIN_CRC32C(crc);
	if (!EQ_CRC32C(crc, header.crc))
	{
		lease_file_damaged("Its checksum does not match its content.");
		return;
	}
	for (i = 0; i < header.count; i++)
		if (lease_file_entry_valid(&entries[i]) &&
			!lease_file_load(-1, &entries[i], header.seq))
			(*dropped)++;
	fencing_lease_table->seq = Max(fencing_lease_table->seq, header.seq);
	fencing_lease_table->file_covered = header.seq;
	fencing_lease_table->last_known = header.last_known;
	pfree(entries);
}

/*
 * Fill the new table from the file; whether the file holds the table as
 * it is now, slot by slot (else it is to be written anew).
 */
static bool
lease_file_read(void)
{
	LeaseFileHeader header;
	int			dropped = 0;
	bool		in_place = false;
	int			fd;

	fd = OpenTransientFile(LEASE_FILE, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		if (errno == ENOENT)
			return true;		/* the first write creates it */
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", LEASE_FILE),
				 errdetail("Fencing leases from before the restart are ignored.")));
		return false;
	}
	if (!lease_file_pread(fd, &header, sizeof(header), 0))
		lease_file_damaged("The file is shorter than its header.");
	else if (header.magic == LEASE_FILE_MAGIC && header.version == 1)
		lease_file_read_v1(fd, &dropped);
	else if (header.magic != LEASE_FILE_MAGIC ||
			 header.version != LEASE_FILE_VERSION ||
			 header.slot_size != sizeof(LeaseFileSlot) ||
			 header.capacity > 1000000 ||
			 !EQ_CRC32C(lease_header_crc(&header), header.crc))
		lease_file_damaged(psprintf("Its header (magic 0x%08X, version %u, %u slots of %u bytes) is not one this server writes.",
									header.magic, header.version,
									header.capacity, header.slot_size));
	else
	{
		fencing_lease_table->seq = header.seq;
		fencing_lease_table->file_covered = header.seq;
		fencing_lease_table->last_known = header.last_known;
		in_place = lease_file_read_slots(fd, &header, &dropped);
	}
	CloseTransientFile(fd);
	if (dropped > 0)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("%d fencing leases from before the restart do not fit in fencing.max_leases (%d) and are dropped",
						dropped, fencing_lease_table->capacity)));
	return in_place;
}

/*
 * Write the whole file anew from the table: a temporary file, fsynced,
 * then durable_rename.  At start, when the file does not hold the table
 * slot by slot.  A failure is logged; the old file stays.
 */
static void
lease_file_write_all(void)
{
	LeaseFileSlot slot;
	int			fd;
	int			i;
	bool		ok = true;

	fd = OpenTransientFile(LEASE_FILE_TMP, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd < 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", LEASE_FILE_TMP)));
		return;
	}
	for (i = 0; ok && i < fencing_lease_table->capacity; i++)
		if (fencing_lease_entries[i].in_use)
		{
			lease_slot_fill(&slot, &fencing_lease_entries[i]);
			ok = lease_file_pwrite(fd, &slot, sizeof(slot), lease_slot_offset(i), LOG);
		}
	ok = ok && lease_file_finish(fd, fencing_lease_table->seq,
								 fencing_lease_table->last_known, LOG);
	CloseTransientFile(fd);
	if (ok)
		(void) durable_rename(LEASE_FILE_TMP, LEASE_FILE, LOG);
}

/*
 * The postmaster has created the table (at start and at a crash restart):
 * fill it from the file, and arrange to write the file when this segment
 * goes.
 */
void
fencing_lease_store_startup(void)
{
	if (!lease_file_read())
		lease_file_write_all();
	fencing_lease_loaded();
	pg_atomic_write_u64(&fencing_lease_table->file_seq, fencing_lease_table->seq);
	on_shmem_exit(lease_postmaster_exit, (Datum) 0);
}

/*
 * The postmaster lets go of the segment, at a stop (every mode) and at a
 * crash restart: no backend runs, but one that died may have left the lock
 * held or an entry half written, so copy without the lock and skip such
 * entries.  Every dirty entry is written; all of them when a process died
 * writing the file (the entries it had taken out of the ring may not have
 * reached it).
 */
static void
lease_postmaster_exit(int code, Datum arg)
{
	LeaseTable *table = fencing_lease_table;
	bool		all = pg_atomic_read_u32(&table->flushing) != 0;
	LeaseFileSlot slot;
	int			fd;
	int			i;
	bool		ok = true;

	if ((fd = lease_file_open(LOG)) < 0)
		return;
	for (i = 0; ok && i < table->capacity; i++)
	{
		Lease	   *lease = &fencing_lease_entries[i];
		Lease		copy;
		uint32		before = lease->changecount;

		if (!all && !lease->dirty)
			continue;
		pg_read_barrier();
		copy = *lease;
		pg_read_barrier();
		if ((before & 1) != 0 || before != lease->changecount ||
			(copy.in_use && !lease_file_entry_valid(&copy.data)))
			continue;
		lease_slot_fill(&slot, &copy);
		ok = lease_file_pwrite(fd, &slot, sizeof(slot), lease_slot_offset(i), LOG);
	}
	if (ok)
		(void) lease_file_finish(fd, table->seq, lease_known_moment(), LOG);
	CloseTransientFile(fd);
}

/*
 * The keeper.
 */

/* The keeper exits: nobody is to set its latch any more. */
static void
lease_keeper_exit(int code, Datum arg)
{
	LWLockAcquire(fencing_lease_table->lock, LW_EXCLUSIVE);
	fencing_lease_table->keeper_latch = NULL;
	LWLockRelease(fencing_lease_table->lock);
}

/*
 * On a primary: the start of service if it has not happened, lapses noted
 * and gone entries dropped, a chunk per hold of the lock.  Returns when an
 * entry next changes state (0: none).
 */
static TimestampTz
lease_keeper_sweep(void)
{
	TimestampTz now;
	TimestampTz next;
	int			done;

	fencing_lease_ensure_serving();
	do
	{
		CHECK_FOR_INTERRUPTS();
		LWLockAcquire(fencing_lease_table->lock, LW_EXCLUSIVE);
		now = GetCurrentTimestamp();
		done = fencing_lease_lapse_due(now, LEASE_SWEEP_CHUNK);
		next = fencing_lease_next_event(now);
		LWLockRelease(fencing_lease_table->lock);
	} while (done == LEASE_SWEEP_CHUNK);
	return next;
}

/* The keeper's write of the file, unless a backend is writing it already. */
static void
lease_keeper_write(void)
{
	if (!lease_flush_begin())
		return;
	(void) lease_file_flush(LOG);
	lease_flush_end();
}

/*
 * Main of the "fencing lease keeper": writes the changed entries to the
 * file soon after they change, at most once every LEASE_FILE_INTERVAL_MS,
 * and on a primary serves the table and sweeps it when a lease lapses or
 * a delay ends, at most once every LEASE_SWEEP_INTERVAL_MS.  A stop needs no last write here: the postmaster writes
 * the file once every process has gone.
 */
void
fencing_lease_keeper_main(Datum main_arg)
{
	TimestampTz last_write = 0;
	TimestampTz last_sweep = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	LWLockAcquire(fencing_lease_table->lock, LW_EXCLUSIVE);
	fencing_lease_table->keeper_latch = MyLatch;
	LWLockRelease(fencing_lease_table->lock);
	on_shmem_exit(lease_keeper_exit, (Datum) 0);

	while (!ShutdownRequestPending)
	{
		TimestampTz now;
		TimestampTz wake;

		ResetLatch(MyLatch);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		/*
		 * From here on, the first change sets the latch again: also one the
		 * write below does not see, and one after a backend wrote the file
		 * (fencing_lease_make_durable) and left the keeper nothing to do.
		 */
		pg_atomic_write_u32(&fencing_lease_table->keeper_wanted, 0);
		pg_memory_barrier();

		now = GetCurrentTimestamp();
		if (RecoveryInProgress())
		{
			lease_note_primary_heard();
			wake = TimestampTzPlusMilliseconds(now, LEASE_RECOVERY_POLL_MS);
		}
		else if (now >= TimestampTzPlusMilliseconds(last_sweep, LEASE_SWEEP_INTERVAL_MS))
		{
			wake = lease_keeper_sweep();
			last_sweep = now;
			if (wake == 0)
				wake = TimestampTzPlusMilliseconds(now, LEASE_KEEPER_MAX_SLEEP_MS);
			wake = Max(wake, TimestampTzPlusMilliseconds(now, LEASE_SWEEP_INTERVAL_MS));
		}
		else
			wake = TimestampTzPlusMilliseconds(last_sweep, LEASE_SWEEP_INTERVAL_MS);

		/* a hint read without the lock: the write looks again under it */
		if (fencing_lease_table->dirty_count > 0)
		{
			TimestampTz due = TimestampTzPlusMilliseconds(last_write,
														  LEASE_FILE_INTERVAL_MS);

			if (now >= due)
			{
				lease_keeper_write();
				last_write = now;
				due = TimestampTzPlusMilliseconds(now, LEASE_FILE_INTERVAL_MS);
			}
			if (fencing_lease_table->dirty_count > 0)
			{
				/*
				 * The keeper wakes at due to write what is dirty then, so a
				 * change before that needs no latch (no signal per lease
				 * call under load).
				 */
				wake = Min(wake, due);
				pg_atomic_write_u32(&fencing_lease_table->keeper_wanted, 1);
			}
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(TimestampDifferenceMilliseconds(now, wake), 1),
						 PG_WAIT_EXTENSION);
	}
	proc_exit(0);
}
