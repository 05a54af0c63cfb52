/*-------------------------------------------------------------------------
 *
 * rmgr.c
 *		fencing's WAL resource managers, and the records each module
 *		registers under them.
 *
 * Every record of the extension is written under FENCING_RMGR_ID, 199,
 * fencing's own id.  fencing 1.0 wrote under RM_EXPERIMENTAL_ID (128),
 * which stays registered for replay only, with the same record format, so
 * that WAL written by 1.0 still replays (crash recovery right after the
 * upgrade, a 1.1 standby of a 1.0 primary) unless fencing.replay_1_0_wal
 * frees the id for another extension.
 *
 * This file knows no record of its own: each module that writes records
 * registers them (fencing_wal_register_records: which info codes are its,
 * and how to check, redo and describe them), and redo, desc and identify
 * pass each record to the module whose code it carries.  So a module
 * above the token layer can have records replayed without redo calling
 * up into it.  A record that no module claims, or that its module finds
 * invalid, stops redo with an error: another extension may use the same id.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/tokens/rmgr.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "utils/guc.h"

#include "tokens/tokens.h"

#define FENCING_RMGR_NAME		"fencing"
#define FENCING_1_0_RMGR_ID		RM_EXPERIMENTAL_ID
#define FENCING_1_0_RMGR_NAME	"fencing_1_0"

/* Modules that write records: one slot each is plenty. */
#define FENCING_MAX_RECORD_KINDS	8

/* The info codes a record can carry: the bits above XLR_INFO_MASK. */
#define FENCING_INFO_CODE_STEP		(XLR_INFO_MASK + 1)

static const FencingWalRecords *record_kinds[FENCING_MAX_RECORD_KINDS];
static int	record_kind_count = 0;

/* GUC fencing.replay_1_0_wal */
static bool replay_1_0_wal = true;

static void fencing_rmgr_redo(XLogReaderState *record);
static void fencing_rmgr_desc(StringInfo buf, XLogReaderState *record);
static const char *fencing_rmgr_identify(uint8 info);

static RmgrData fencing_rmgr = {
	.rm_name = FENCING_RMGR_NAME,
	.rm_redo = fencing_rmgr_redo,
	.rm_desc = fencing_rmgr_desc,
	.rm_identify = fencing_rmgr_identify
};

static RmgrData fencing_1_0_rmgr = {
	.rm_name = FENCING_1_0_RMGR_NAME,
	.rm_redo = fencing_rmgr_redo,
	.rm_desc = fencing_rmgr_desc,
	.rm_identify = fencing_rmgr_identify
};

/*
 * Define the setting and register the resource managers; must happen while
 * the postmaster preloads the library, before recovery can meet a record.
 */
void
fencing_rmgr_init(void)
{
	DefineCustomBoolVariable("fencing.replay_1_0_wal",
							 "Replays WAL records written by fencing 1.0 (resource manager id 128).",
							 "Turn off only when another extension needs resource manager id 128 and no WAL written by fencing 1.0 remains to be replayed.",
							 &replay_1_0_wal,
							 true,
							 PGC_POSTMASTER,
							 0,
							 NULL, NULL, NULL);

	RegisterCustomRmgr(FENCING_RMGR_ID, &fencing_rmgr);
	if (replay_1_0_wal)
		RegisterCustomRmgr(FENCING_1_0_RMGR_ID, &fencing_1_0_rmgr);
}

/*
 * A module's records, from _PG_init: from now on redo, desc and identify
 * pass the records whose code it names to it.
 */
void
fencing_wal_register_records(const FencingWalRecords *records)
{
	if (record_kind_count >= FENCING_MAX_RECORD_KINDS)
		elog(ERROR, "too many kinds of fencing WAL records");
	record_kinds[record_kind_count++] = records;
}

/* The module whose records carry this info code, or NULL. */
static const FencingWalRecords *
records_of(uint8 info)
{
	int			i;

	for (i = 0; i < record_kind_count; i++)
	{
		if (record_kinds[i]->identify(info) != NULL)
			return record_kinds[i];
	}
	return NULL;
}

/*
 * What is wrong with a record of an unknown code: the codes fencing
 * writes, "0x00 (RESERVE)", "... and ..." for two or more.
 */
static const char *
unknown_code(uint8 info)
{
	StringInfoData codes;
	const char *names[256 / FENCING_INFO_CODE_STEP];
	int			values[256 / FENCING_INFO_CODE_STEP];
	int			n = 0;
	int			code;
	int			i;

	for (code = 0; code < 256; code += FENCING_INFO_CODE_STEP)
	{
		const FencingWalRecords *records = records_of((uint8) code);

		if (records == NULL)
			continue;
		names[n] = records->identify((uint8) code);
		values[n++] = code;
	}
	initStringInfo(&codes);
	for (i = 0; i < n; i++)
		appendStringInfo(&codes, "%s0x%02X (%s)",
						 i == 0 ? "" : i == n - 1 ? " and " : ", ",
						 values[i], names[i]);
	return psprintf("Its info bits are 0x%02X; fencing writes only %s.",
					info, codes.data);
}

/*
 * Check a record: NULL when valid (and *records its module), else a
 * sentence saying what is wrong.  Shared by redo and desc.
 */
static const char *
check_record(XLogReaderState *record, const FencingWalRecords **records)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;

	*records = records_of(info);
	if (*records == NULL)
		return unknown_code(info);
	return (*records)->check(record);
}

/*
 * The ERROR for a record this build did not write.  Redo must not trust a
 * record blindly: another extension may use the same resource manager id.
 */
static void
report_invalid_record(XLogReaderState *record, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("invalid fencing WAL record at %X/%X (resource manager %d)",
					LSN_FORMAT_ARGS(record->ReadRecPtr), XLogRecGetRmid(record)),
			 errdetail("%s", detail),
			 errhint("Another extension may write WAL under the same resource manager id; fencing uses id %d, and id %d for WAL written by fencing 1.0 unless fencing.replay_1_0_wal is off.",
					 FENCING_RMGR_ID, FENCING_1_0_RMGR_ID)));
}

/* Redo a record, in crash recovery or on a standby: its module's redo. */
static void
fencing_rmgr_redo(XLogReaderState *record)
{
	const FencingWalRecords *records;
	const char *problem = check_record(record, &records);

	if (problem != NULL)
		report_invalid_record(record, problem);
	records->redo(record);
}

/* Describe a record, for redo error context and pg_walinspect. */
static void
fencing_rmgr_desc(StringInfo buf, XLogReaderState *record)
{
	const FencingWalRecords *records;
	const char *problem = check_record(record, &records);

	if (problem == NULL)
		records->desc(buf, record);
	else
		appendStringInfo(buf, "invalid record: %s", problem);
}

/* Name a record type; NULL (core says UNKNOWN) for a code nobody writes. */
static const char *
fencing_rmgr_identify(uint8 info)
{
	const FencingWalRecords *records = records_of(info & ~XLR_INFO_MASK);

	return records != NULL ? records->identify(info & ~XLR_INFO_MASK) : NULL;
}
