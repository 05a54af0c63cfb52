/*-------------------------------------------------------------------------
 *
 * lease_store.c
 *		Leases across restarts, crashes and failovers: their WAL records,
 *		redo, the state file $PGDATA/fencing.leases, the "fencing lease
 *		keeper" background worker, and the start of service.
 *
 * Every change of a lease (acquisition, renewal, release, break, a lapse
 * noted) is a small WAL record of fencing's resource manager, inserted with
 * no flush and no transaction id: it reaches disk with the next flush, at
 * most wal_writer_delay after the keeper's next write of the file, when the
 * keeper asks the WAL writer for it as an asynchronous commit does.  A standby's redo applies the records to its
 * own table, so a promoted standby knows the leases; crash recovery does
 * the same on the primary.
 *
 * Crash recovery starts at the last checkpoint's redo point and there is no
 * checkpoint hook, so records older than that point must be in the state
 * file.  The keeper writes the file (durable_rename: file and directory
 * fsynced) soon after each change (backends and redo set its latch; writes
 * are at least LEASE_FILE_INTERVAL_MS apart, so a burst costs one), and the
 * postmaster writes it once more when it lets go of shared memory (at every
 * stop and at a crash restart), from the table as it was, without the lock.
 * Changes are numbered (seq): the file says up to which change it reflects,
 * redo applies only records above it, and numbering goes on from the
 * highest seen, so a file ahead of the WAL that survived (changes whose
 * records were never flushed) is harmless.  What may be lost: a change
 * whose record was never flushed and that no file reflects (a postmaster
 * killed or a power loss right after it, or a checkpoint completed between
 * the change and the keeper's next write).  Its lease is then lost (the
 * holder's next renewal raises FN004) or a released one reappears until
 * its ttl passes: availability, never safety, which rests on the fences.
 * A damaged file is logged and the server starts without leases.
 *
 * When a server starts serving (a clean start, after crash recovery, at
 * promotion), every lease that was live at the last moment its state is
 * known to have held counts as renewed then: expires_at = now + its ttl,
 * as etcd extends leases on a leader change; a lease already lapsed at
 * that moment is gone.  That moment is the newest of: the file's (the
 * time of its snapshot, or at a stop the time of the stop), the newest
 * record's, the last transaction replayed, and on a standby the last
 * message from its primary.  The keeper does this as soon as recovery has
 * ended; every lease function and grant-path check that finds the table
 * not yet serving does it first.
 *
 * On the primary the keeper also notes each lapse when it happens (counted
 * in fencing.stats, written to WAL so that standbys learn the moment, and
 * to the file) and drops entries whose lock-delay has ended.
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
#define LEASE_FILE_VERSION	1

/* The keeper's pace: files at least this far apart, and its idle sleeps. */
#define LEASE_FILE_INTERVAL_MS		20
#define LEASE_RECOVERY_POLL_MS		250
#define LEASE_KEEPER_MAX_SLEEP_MS	10000

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

/* The file: this header, then count LeaseData. */
typedef struct LeaseFileHeader
{
	uint32		magic;
	uint32		version;
	uint32		count;
	uint32		entry_size;
	uint64		seq;
	TimestampTz last_known;
	pg_crc32c	crc;			/* of the entries, then the header up to crc */
} LeaseFileHeader;

static void lease_postmaster_exit(int code, Datum arg);
static void lease_keeper_exit(int code, Datum arg);
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
 * Number a change and write its record; the caller holds the table's lock
 * exclusively and is on a primary, and calls fencing_lease_changed() once
 * it let go of the lock.
 *
 * The record needs no flush at the end of the caller's transaction: the
 * keeper asks the WAL writer for it when it next writes the file.  So the
 * transaction's own end of WAL (XactLastRecEnd) is put back as it was, and
 * a transaction that wrote nothing else ends as if it had written no WAL
 * (asking the WAL writer at every commit to flush, and waking it for every
 * page, would cost a lease as much as the rest of its work).  A
 * transaction that goes on writing moves XactLastRecEnd past the record
 * anyway.
 */
void
fencing_lease_log(uint8 info, const LeaseData *data, TimestampTz at)
{
	xl_fencing_lease rec;
	XLogRecPtr	xact_last_rec_end = XactLastRecEnd;

	fencing_lease_table->seq++;
	fencing_lease_table->changes++;
	rec.seq = fencing_lease_table->seq;
	rec.at = at;
	memcpy(&rec.lease, data, offsetof(LeaseData, name));

	XLogBeginInsert();
	XLogSetRecordFlags(XLOG_MARK_UNIMPORTANT);
	XLogRegisterData((char *) &rec, SizeOfLeaseRecordHeader);
	XLogRegisterData((char *) data->name, data->namelen);
	if (data->holderlen > 0)
		XLogRegisterData((char *) data->holder, data->holderlen);
	fencing_lease_table->last_lsn = XLogInsert(FENCING_RMGR_ID, info);
	XactLastRecEnd = xact_last_rec_end;
}

/*
 * After a change: wake the keeper to write the file (and have the WAL
 * writer flush the record), unless an earlier change since its last write
 * already did.
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
}

/*
 * A standby whose table is full meets a new lease: drop the entries that
 * had lapsed or were broken by the record's moment.  If none had (this
 * server's fencing.max_leases is below the primary's), drop the one that
 * expires soonest, and say so.  Exclusive lock held.
 */
static void
lease_redo_make_room(TimestampTz at)
{
	int			soonest = 0;
	int			i = 0;
	bool		dropped = false;

	while (i < fencing_lease_table->count)
	{
		const LeaseData *d = &fencing_lease_entries[i].data;

		if (d->broken || d->expires_at <= at)
		{
			fencing_lease_remove(i);
			dropped = true;
			continue;
		}
		if (d->expires_at < fencing_lease_entries[soonest].data.expires_at)
			soonest = i;
		i++;
	}
	if (dropped)
		return;
	ereport(WARNING,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("fencing lease \"%.*s\" is dropped: the lease table of this server is full",
					(int) fencing_lease_entries[soonest].data.namelen,
					fencing_lease_entries[soonest].data.name),
			 errdetail("All %d entries of fencing.max_leases hold leases the primary still holds.",
					   fencing_lease_table->capacity),
			 errhint("Set fencing.max_leases on this server to at least the primary's value (it takes effect at server restart).")));
	fencing_lease_remove(soonest);
}

/*
 * Redo a lease record, on a standby or in crash recovery: apply it unless
 * the state file already reflects it.
 */
static void
lease_redo(XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
	xl_fencing_lease rec;

	lease_record_read(record, &rec);

	LWLockAcquire(fencing_lease_table->lock, LW_EXCLUSIVE);
	if (rec.seq > fencing_lease_table->seq)
	{
		int			i = fencing_lease_find(rec.lease.dboid, rec.lease.key);

		fencing_lease_table->seq = rec.seq;
		fencing_lease_table->changes++;
		if (rec.at > fencing_lease_table->last_known)
			fencing_lease_table->last_known = rec.at;
		if (info == XLOG_FENCING_LEASE_PUT)
		{
			if (i < 0 && fencing_lease_table->count >= fencing_lease_table->capacity)
				lease_redo_make_room(rec.at);
			(void) fencing_lease_put(i, &rec.lease);
		}
		else if (i >= 0 && fencing_lease_entries[i].data.token == rec.lease.token)
			fencing_lease_remove(i);
	}
	LWLockRelease(fencing_lease_table->lock);

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
	appendStringInfo(buf, "seq " UINT64_FORMAT " lease \"%.*s\" database %u token " INT64_FORMAT " expires %s%s",
					 rec.seq, (int) rec.lease.namelen, rec.lease.name,
					 rec.lease.dboid, rec.lease.token,
					 timestamptz_to_str(rec.lease.expires_at),
					 rec.lease.broken ? " broken" : "");
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
 * Lapses.
 */

/*
 * Note the lapse of every lease whose ttl has passed (counted once, with
 * the delay it starts, and logged so that a standby learns the moment) and
 * drop the entries that are gone.  Exclusive lock held; on a primary only.
 * Returns the soonest moment at which an entry changes state again, or 0.
 */
TimestampTz
fencing_lease_sweep(TimestampTz now)
{
	TimestampTz next = 0;
	int			lapsed = 0;
	int			i = 0;

	Assert(!RecoveryInProgress());
	while (i < fencing_lease_table->count)
	{
		Lease	   *lease = &fencing_lease_entries[i];
		TimestampTz until;
		LeaseState	state = fencing_lease_state(lease, now, &until);

		if (state != LEASE_LIVE && !lease->lapse_noted)
		{
			fencing_lease_note_lapse(lease);
			fencing_lease_table->changes++;
			if (!lease->data.broken)
			{
				fencing_lease_log(XLOG_FENCING_LEASE_PUT, &lease->data, now);
				lapsed++;
			}
		}
		if (state == LEASE_GONE)
		{
			fencing_lease_remove(i);
			fencing_lease_table->changes++;
			continue;
		}
		if (next == 0 || until < next)
			next = until;
		i++;
	}
	if (lapsed > 0)
	{
		fencing_stat_add(FENCING_STAT_LEASES_LAPSED, lapsed);
		if (fencing_lock_delay_ms() > 0)
			fencing_stat_add(FENCING_STAT_DELAYS_STARTED, lapsed);
	}
	return next;
}

/*
 * The start of service.
 */

/*
 * The last moment at which the primary is known to have been alive, from
 * outside the table: the last transaction replayed, and on a (former)
 * standby the send time of the last message from its primary.  0 when
 * neither is known.
 */
static TimestampTz
lease_last_heard(void)
{
	TimestampTz heard = GetLatestXTime();

	if (WalRcv != NULL)
	{
		TimestampTz sent;

		SpinLockAcquire(&WalRcv->mutex);
		sent = WalRcv->lastMsgSendTime;
		SpinLockRelease(&WalRcv->mutex);
		heard = Max(heard, sent);
	}
	return heard;
}

/*
 * The server has just started serving: every lease live at the last known
 * moment is renewed from now for its ttl (a live holder could not renew
 * while no server ran), the others have ended.  An ended lease whose
 * lock-delay still runs stays in the table, for the keeper's sweep to note
 * its lapse; only those whose delay is over are dropped.
 */
static void
lease_start_serving(void)
{
	TimestampTz heard = lease_last_heard();
	TimestampTz now = GetCurrentTimestamp();
	int			kept = 0;
	int			ended = 0;
	int			i = 0;

	LWLockAcquire(fencing_lease_table->lock, LW_EXCLUSIVE);
	if (fencing_lease_table->serving)
	{
		LWLockRelease(fencing_lease_table->lock);
		return;
	}
	heard = Max(heard, fencing_lease_table->last_known);
	while (i < fencing_lease_table->count)
	{
		LeaseData	data = fencing_lease_entries[i].data;
		TimestampTz until;

		if (data.broken || data.expires_at <= heard)
		{
			ended++;
			if (fencing_lease_state(&fencing_lease_entries[i], now, &until) == LEASE_GONE)
				fencing_lease_remove(i);
			else
				i++;
			continue;
		}
		data.renewed_at = now;
		data.expires_at = TimestampTzPlusMilliseconds(now, data.span_ms);
		(void) fencing_lease_put(i, &data);
		fencing_lease_log(XLOG_FENCING_LEASE_PUT, &data, now);
		kept++;
		i++;
	}
	fencing_lease_table->serving = true;
	fencing_lease_table->changes++;
	LWLockRelease(fencing_lease_table->lock);

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

/* The CRC of a file's entries and header. */
static pg_crc32c
lease_file_crc(const LeaseFileHeader *header, const LeaseData *entries)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, entries, mul_size(header->count, sizeof(LeaseData)));
	COMP_CRC32C(crc, header, offsetof(LeaseFileHeader, crc));
	FIN_CRC32C(crc);
	return crc;
}

/*
 * Write the file: a temporary file, fsynced, then durable_rename.  A
 * failure is logged; the last good file stays.
 */
static void
lease_file_write(const LeaseData *entries, int count, uint64 seq,
				 TimestampTz last_known)
{
	LeaseFileHeader header;
	Size		size = mul_size(count, sizeof(LeaseData));
	int			fd;

	memset(&header, 0, sizeof(header));
	header.magic = LEASE_FILE_MAGIC;
	header.version = LEASE_FILE_VERSION;
	header.count = count;
	header.entry_size = sizeof(LeaseData);
	header.seq = seq;
	header.last_known = last_known;
	header.crc = lease_file_crc(&header, entries);

	fd = OpenTransientFile(LEASE_FILE_TMP, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd < 0 ||
		write(fd, &header, sizeof(header)) != sizeof(header) ||
		(size > 0 && write(fd, entries, size) != (ssize_t) size) ||
		pg_fsync(fd) != 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", LEASE_FILE_TMP),
				 errdetail("\"%s\" keeps its previous content; the fencing lease changes since are only in WAL.",
						   LEASE_FILE)));
		if (fd >= 0)
			CloseTransientFile(fd);
		return;
	}
	CloseTransientFile(fd);
	(void) durable_rename(LEASE_FILE_TMP, LEASE_FILE, LOG);
}

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
		d->token >= 1 && d->span_ms >= 1;
}

/*
 * Fill the new table from the file, in the postmaster before anyone uses
 * it.  The file stays: until the keeper writes a new one, it is what a
 * crash would start from.
 */
static void
lease_file_read(void)
{
	LeaseFileHeader header;
	LeaseData  *entries;
	Size		size;
	int			fd;
	uint32		i;
	int			dropped = 0;

	fd = OpenTransientFile(LEASE_FILE, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		if (errno != ENOENT)
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", LEASE_FILE),
					 errdetail("Fencing leases from before the restart are ignored.")));
		return;
	}
	if (read(fd, &header, sizeof(header)) != sizeof(header))
	{
		CloseTransientFile(fd);
		lease_file_damaged("The file is shorter than its header.");
		return;
	}
	if (header.magic != LEASE_FILE_MAGIC || header.version != LEASE_FILE_VERSION ||
		header.entry_size != sizeof(LeaseData) ||
		header.count > (uint32) MaxAllocSize / sizeof(LeaseData))
	{
		CloseTransientFile(fd);
		lease_file_damaged(psprintf("Its header (magic 0x%08X, version %u, %u entries of %u bytes) is not one this server writes.",
									header.magic, header.version,
									header.count, header.entry_size));
		return;
	}
	size = mul_size(header.count, sizeof(LeaseData));
	entries = palloc(Max(size, 1));
	if (read(fd, entries, size) != (ssize_t) size)
	{
		CloseTransientFile(fd);
		lease_file_damaged("The file is shorter than its entries.");
		return;
	}
	CloseTransientFile(fd);
	if (!EQ_CRC32C(lease_file_crc(&header, entries), header.crc))
	{
		lease_file_damaged("Its checksum does not match its content.");
		return;
	}

	for (i = 0; i < header.count; i++)
	{
		int			e;

		if (!lease_file_entry_valid(&entries[i]))
			continue;
		e = fencing_lease_find(entries[i].dboid, entries[i].key);
		if (e < 0 && fencing_lease_table->count >= fencing_lease_table->capacity)
		{
			dropped++;
			continue;
		}
		(void) fencing_lease_put(e, &entries[i]);
	}
	fencing_lease_table->seq = header.seq;
	fencing_lease_table->last_known = header.last_known;
	pfree(entries);
	if (dropped > 0)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("%d fencing leases from before the restart do not fit in fencing.max_leases (%d) and are dropped",
						dropped, fencing_lease_table->capacity)));
}

/*
 * The postmaster has created the table (at start and at a crash restart):
 * fill it from the file, and arrange to write the file when this segment
 * goes.
 */
void
fencing_lease_store_startup(void)
{
	lease_file_read();
	on_shmem_exit(lease_postmaster_exit, (Datum) 0);
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
 * The postmaster lets go of the segment, at a stop (every mode) and at a
 * crash restart: no backend runs, but one that died may have left the lock
 * held or an entry half written, so copy without the lock and skip such
 * entries.
 */
static void
lease_postmaster_exit(int code, Datum arg)
{
	int			count = Min(fencing_lease_table->count, fencing_lease_table->capacity);
	LeaseData  *copy = MemoryContextAlloc(TopMemoryContext,
										  sizeof(LeaseData) * Max(count, 1));
	int			n = 0;
	int			i;

	for (i = 0; i < count; i++)
	{
		Lease	   *lease = &fencing_lease_entries[i];
		uint32		before = lease->changecount;

		pg_read_barrier();
		copy[n] = lease->data;
		pg_read_barrier();
		if ((before & 1) == 0 && before == lease->changecount &&
			lease_file_entry_valid(&copy[n]))
			n++;
	}
	lease_file_write(copy, n, fencing_lease_table->seq, lease_known_moment());
	pfree(copy);
}

/*
 * The keeper.
 */

/*
 * Copy the table under the lock and write the file; returns the change
 * count the file reflects.
 */
static uint64
lease_keeper_write(LeaseData *copy)
{
	TimestampTz heard = RecoveryInProgress() ? lease_last_heard() : 0;
	TimestampTz known;
	XLogRecPtr	last_lsn;
	uint64		changes;
	uint64		seq;
	int			count;
	int			i;

	LWLockAcquire(fencing_lease_table->lock, LW_SHARED);
	count = fencing_lease_table->count;
	for (i = 0; i < count; i++)
		copy[i] = fencing_lease_entries[i].data;
	seq = fencing_lease_table->seq;
	changes = fencing_lease_table->changes;
	known = Max(lease_known_moment(), heard);
	last_lsn = fencing_lease_table->last_lsn;
	LWLockRelease(fencing_lease_table->lock);

	/* the records of these changes reach disk with the WAL writer's next flush */
	if (!XLogRecPtrIsInvalid(last_lsn) && !RecoveryInProgress())
		XLogSetAsyncXactLSN(last_lsn);
	lease_file_write(copy, count, seq, known);
	return changes;
}

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
 * and gone entries dropped.  Returns when an entry next changes state (0:
 * none).
 */
static TimestampTz
lease_keeper_sweep(void)
{
	TimestampTz next;

	fencing_lease_ensure_serving();
	LWLockAcquire(fencing_lease_table->lock, LW_EXCLUSIVE);
	next = fencing_lease_sweep(GetCurrentTimestamp());
	LWLockRelease(fencing_lease_table->lock);
	return next;
}

/*
 * Main of the "fencing lease keeper": writes the file soon after changes,
 * at most once every LEASE_FILE_INTERVAL_MS, and on a primary serves the
 * table and sweeps it when a lease lapses or a delay ends.  While a write
 * is pending, keeper_wanted stays set, so changes meanwhile do not wake
 * it; it is cleared just before the table is copied, so that a change
 * after the copy wakes the keeper again.  A stop needs no last write here:
 * the postmaster writes the file once every process has gone.
 */
void
fencing_lease_keeper_main(Datum main_arg)
{
	LeaseData  *copy;
	uint64		written = 0;
	uint64		swept = 0;
	TimestampTz last_write = 0;
	TimestampTz next_sweep = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	copy = MemoryContextAlloc(TopMemoryContext,
							  sizeof(LeaseData) * fencing_lease_table->capacity);
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

		now = GetCurrentTimestamp();
		if (RecoveryInProgress())
			wake = TimestampTzPlusMilliseconds(now, LEASE_RECOVERY_POLL_MS);
		else
		{
			if (now >= next_sweep || fencing_lease_table->changes != swept)
			{
				next_sweep = lease_keeper_sweep();
				if (next_sweep == 0)
					next_sweep = TimestampTzPlusMilliseconds(now, LEASE_KEEPER_MAX_SLEEP_MS);
				swept = fencing_lease_table->changes;
			}
			wake = next_sweep;
		}

		if (fencing_lease_table->changes == written)
		{
			pg_atomic_write_u32(&fencing_lease_table->keeper_wanted, 0);
			pg_memory_barrier();
		}
		if (fencing_lease_table->changes != written)
		{
			TimestampTz due = TimestampTzPlusMilliseconds(last_write,
														  LEASE_FILE_INTERVAL_MS);

			if (now >= due)
			{
				pg_atomic_write_u32(&fencing_lease_table->keeper_wanted, 0);
				pg_memory_barrier();
				written = lease_keeper_write(copy);
				last_write = now;
				due = TimestampTzPlusMilliseconds(now, LEASE_FILE_INTERVAL_MS);
			}
			wake = Min(wake, due);
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(TimestampDifferenceMilliseconds(now, wake), 1),
						 PG_WAIT_EXTENSION);
	}
	proc_exit(0);
}
