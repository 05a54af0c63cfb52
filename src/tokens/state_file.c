/*-------------------------------------------------------------------------
 *
 * state_file.c
 *		$PGDATA/fencing.state: the token limit that has to outlive the WAL
 *		record that made it durable.
 *
 * There is no checkpoint hook: once a checkpoint has passed a reservation
 * record, crash recovery would not replay it, so the file carries the
 * limit across.  token_wal.c writes it before each reservation record (and
 * redo writes it on a standby); the postmaster reads it once when shared
 * memory is created, before redo can raise the limit further.  A file that
 * cannot be trusted stops the server: starting without it would quietly
 * rest T2 on the clock alone.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/tokens/state_file.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"

#include "tokens/tokens.h"

#define FENCING_STATE_FILE		"fencing.state"
#define FENCING_STATE_TMP		"fencing.state.tmp"
#define FENCING_STATE_MAGIC		0x464E4331	/* "FNC1" */
#define FENCING_STATE_VERSION	2
#define FENCING_BACKUP_LABEL	"backup_label"

/*
 * The state file, version 2: the limit and the WAL timeline it belongs to
 * (0: unknown, the next reservation makes a fresh start), guarded by a
 * magic number and a CRC.  Version 1 (fencing 1.0) had no timeline and its
 * CRC where the timeline is now; both are 24 bytes.
 */
typedef struct FencingStateFile
{
	uint32		magic;
	uint32		version;
	uint64		limit;
	TimeLineID	timeline;
	pg_crc32c	crc;
} FencingStateFile;

typedef struct FencingStateFileV1
{
	uint32		magic;
	uint32		version;
	uint64		limit;
	pg_crc32c	crc;
} FencingStateFileV1;

StaticAssertDecl(sizeof(FencingStateFile) == sizeof(FencingStateFileV1),
				 "state file versions 1 and 2 must have the same size");

FENCING_NORETURN static void report_damaged_state_file(const char *detail);

/* Where the state file lives, for fencing.status(). */
const char *
fencing_state_file_path(void)
{
	return FENCING_STATE_FILE;
}

/*
 * Flush an open file or directory; on failure close it and report at
 * elevel (raised to PANIC when data_sync_retry is off), and return false.
 */
static bool
state_file_fsync(int fd, const char *path, int elevel)
{
	int			save_errno;

	if (pg_fsync(fd) == 0)
		return true;
	save_errno = errno;
	CloseTransientFile(fd);
	errno = save_errno;
	ereport(data_sync_elevel(elevel),
			(errcode_for_file_access(),
			 errmsg("could not fsync \"%s\": %m", path)));
	return false;
}

/*
 * Put the flushed temporary file in place and flush the data directory,
 * so that the rename survives a crash.  Two flushes in all with the one of
 * the content: durable_rename() would also flush the temporary file again
 * and the old file, which a reservation does not need (the old file was
 * flushed when it was written, and the new one just was).  Reports a
 * failure at elevel and, when that returns, returns false.
 */
static bool
state_file_rename(int elevel)
{
	int			fd;

	if (rename(FENCING_STATE_TMP, FENCING_STATE_FILE) != 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not rename file \"%s\" to \"%s\": %m",
						FENCING_STATE_TMP, FENCING_STATE_FILE)));
		return false;
	}
	fd = OpenTransientFile(".", O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not open directory \"%s\": %m", DataDir)));
		return false;
	}
	if (!state_file_fsync(fd, DataDir, elevel))
		return false;
	CloseTransientFile(fd);
	return true;
}

/*
 * Write the limit and its timeline to the state file: a temporary file,
 * fsync, rename and a flush of the data directory, so that a crash leaves
 * either the old content or the new one, never a torn file.  Reports a
 * failure at elevel and, when that returns, returns false.  Called under
 * the tokens lock, by the startup process during redo, or by the
 * postmaster at start.
 */
bool
fencing_state_file_write(uint64 limit, TimeLineID timeline, int elevel)
{
	FencingStateFile content;
	int			fd;
	int			save_errno;

	memset(&content, 0, sizeof(content));
	content.magic = FENCING_STATE_MAGIC;
	content.version = FENCING_STATE_VERSION;
	content.limit = limit;
	content.timeline = timeline;
	INIT_CRC32C(content.crc);
	COMP_CRC32C(content.crc, &content, offsetof(FencingStateFile, crc));
	FIN_CRC32C(content.crc);

	fd = OpenTransientFile(FENCING_STATE_TMP, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd < 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", FENCING_STATE_TMP)));
		return false;
	}
	errno = 0;
	if (write(fd, &content, sizeof(content)) != sizeof(content))
	{
		save_errno = errno ? errno : ENOSPC;
		CloseTransientFile(fd);
		errno = save_errno;
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", FENCING_STATE_TMP)));
		return false;
	}
	if (!state_file_fsync(fd, FENCING_STATE_TMP, elevel))
		return false;
	if (CloseTransientFile(fd) != 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", FENCING_STATE_TMP)));
		return false;
	}
	return state_file_rename(elevel);
}

/*
 * A damaged state file stops the server: the limit it should hold is what
 * keeps tokens from repeating after a crash, and starting without it would
 * quietly rest T2 on the clock alone.
 */
static void
report_damaged_state_file(const char *detail)
{
	ereport(FATAL,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("fencing state file \"%s\" is damaged", FENCING_STATE_FILE),
			 errdetail("%s", detail),
			 errhint("Restore the file from a backup of this server, or remove it; without it the server starts as a new cluster does, with a fresh start above its clock plus fencing.clock_tolerance.")));
}

/*
 * Read the state file into buf (one byte more than a valid file has, so
 * that a longer file shows).  Returns the number of bytes read, or -1 when
 * there is no file; any other failure stops the server.
 */
static int
state_file_read(char *buf, int size)
{
	int			fd;
	int			nread;
	int			save_errno;

	fd = OpenTransientFile(FENCING_STATE_FILE, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		if (errno != ENOENT)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not open fencing state file \"%s\": %m", FENCING_STATE_FILE),
					 errhint("Make the file readable by the server, or restore it from a backup of this server.")));
		return -1;
	}
	nread = read(fd, buf, size);
	save_errno = errno;
	CloseTransientFile(fd);
	if (nread < 0)
	{
		errno = save_errno;
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not read fencing state file \"%s\": %m", FENCING_STATE_FILE),
				 errhint("Restore the file from a backup of this server, or remove it; without it the server starts as a new cluster does, with a fresh start above its clock plus fencing.clock_tolerance.")));
	}
	return nread;
}

/*
 * Check the nread bytes of a state file and copy them into *content (a
 * version 1 file has no timeline; content->timeline is then meaningless).
 * A damaged file stops the server.
 */
static void
state_file_check(const char *buf, int nread, FencingStateFile *content)
{
	pg_crc32c	crc;
	size_t		crc_offset;
	pg_crc32c	stored_crc;

	if (nread != sizeof(FencingStateFile))
		report_damaged_state_file(psprintf("The file has %d bytes; a valid one has %d.",
										   nread, (int) sizeof(FencingStateFile)));
	memcpy(content, buf, sizeof(*content));
	if (content->magic != FENCING_STATE_MAGIC)
		report_damaged_state_file(psprintf("Its magic number is 0x%08X instead of 0x%08X.",
										   content->magic, FENCING_STATE_MAGIC));
	if (content->version == 1)
	{
		FencingStateFileV1 v1;

		memcpy(&v1, buf, sizeof(v1));
		crc_offset = offsetof(FencingStateFileV1, crc);
		stored_crc = v1.crc;
	}
	else if (content->version == FENCING_STATE_VERSION)
	{
		crc_offset = offsetof(FencingStateFile, crc);
		stored_crc = content->crc;
	}
	else
		report_damaged_state_file(psprintf("Its format version is %u; this server reads versions 1 and %d.",
										   content->version, FENCING_STATE_VERSION));
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, buf, crc_offset);
	FIN_CRC32C(crc);
	if (!EQ_CRC32C(crc, stored_crc))
		report_damaged_state_file(pstrdup("Its checksum does not match its content."));
	if (content->limit > (uint64) PG_INT64_MAX)
		report_damaged_state_file(psprintf("Its limit " UINT64_FORMAT " is above the largest bigint.",
										   content->limit));
}

/*
 * A version 2 file was read: a backup_label next to it means the data
 * directory is a restored base backup, whose state file may be older than
 * tokens the original server handed out after the backup began, and a
 * file whose timeline is unknown means the same.  Both are fresh starts;
 * the backup's is recorded in the file (timeline unknown) so that a
 * restart before the first reservation does not forget it.
 */
static void
state_file_check_history(FencingTokenState *state,
						 const FencingStateFile *content,
						 int clock_tolerance_ms)
{
	struct stat st;

	state->file_timeline = content->timeline;
	if (stat(FENCING_BACKUP_LABEL, &st) == 0)
	{
		ereport(LOG,
				(errmsg("fencing: the data directory was restored from a base backup: fence tokens make a fresh start"),
				 errdetail("Tokens continue above " UINT64_FORMAT " and above this server's clock plus fencing.clock_tolerance (%d ms).",
						   content->limit, clock_tolerance_ms)));
		state->fresh_start = true;
		state->fresh_reason = FRESH_BACKUP_LABEL;
		if (content->timeline != 0)
		{
			(void) fencing_state_file_write(content->limit, 0, FATAL);
			state->file_timeline = 0;
		}
	}
	else if (content->timeline == 0)
	{
		state->fresh_start = true;
		state->fresh_reason = FRESH_UNKNOWN_TIMELINE;
	}
}

/*
 * Read the state file into the shared state at postmaster start (and after
 * a crash restart), before redo can raise it further.  A missing file is a
 * fresh start (a new cluster, or one that never issued a token), and so is
 * a file from fencing 1.0, a restored base backup's or one whose timeline
 * is unknown (state_file_check_history); each is logged, with the clock
 * tolerance the fresh start will add.  A file that cannot be read, or that
 * is damaged, stops the server.
 */
void
fencing_state_file_load(FencingTokenState *state, int clock_tolerance_ms)
{
	FencingStateFile content;
	char		buf[sizeof(FencingStateFile) + 1];
	int			nread;

	state->file_limit = 0;
	state->file_timeline = 0;
	state->fresh_start = false;
	state->fresh_reason = FRESH_NONE;

	nread = state_file_read(buf, sizeof(buf));
	if (nread < 0)
	{
		ereport(LOG,
				(errmsg("fencing state file \"%s\" not found: fence tokens make a fresh start", FENCING_STATE_FILE),
				 errdetail("A new cluster has no state file. Tokens will continue above this server's clock plus fencing.clock_tolerance (%d ms).",
						   clock_tolerance_ms)));
		state->fresh_start = true;
		state->fresh_reason = FRESH_NO_STATE_FILE;
		return;
	}
	state_file_check(buf, nread, &content);

	state->file_limit = content.limit;
	if (content.version == 1)
	{
		ereport(LOG,
				(errmsg("fencing state file \"%s\" was written by fencing 1.0: fence tokens make a fresh start", FENCING_STATE_FILE),
				 errdetail("Tokens continue above " UINT64_FORMAT " and above this server's clock plus fencing.clock_tolerance (%d ms).",
						   content.limit, clock_tolerance_ms)));
		state->fresh_start = true;
		state->fresh_reason = FRESH_VERSION_1_FILE;
		return;
	}
	state_file_check_history(state, &content, clock_tolerance_ms);
}
