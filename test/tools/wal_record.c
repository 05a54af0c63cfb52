/*-------------------------------------------------------------------------
 *
 * wal_record.c
 *		A test module that writes one WAL record of any resource manager id,
 *		for test/t/017_tokens_wal_records.pl: records as fencing 1.0 wrote
 *		them (id 128), and records fencing never writes, under its own ids,
 *		as another extension sharing an id would.
 *
 * Not part of the build; the test compiles it into its own directory:
 *
 *	gcc -shared -fPIC -I$(pg_config --includedir-server) -Isrc \
 *		test/tools/wal_record.c -o wal_record.so
 *
 * and creates test_wal_record(rmid int, info int, data bytea) returns
 * pg_lsn from it.  XLogInsert does not check that the resource manager is
 * registered, so any id can be written; the record is flushed at once, so
 * an immediate stop right after cannot lose it.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		test/tools/wal_record.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xloginsert.h"
#include "fmgr.h"
#include "utils/pg_lsn.h"

#include "base/base.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(test_wal_record);

/*
 * test_wal_record(rmid int, info int, data bytea) returns pg_lsn: write
 * and flush one record with that resource manager id, info byte and main
 * data, and return where it starts.
 */
Datum
test_wal_record(PG_FUNCTION_ARGS)
{
	int32		rmid = PG_GETARG_INT32(0);
	int32		info = PG_GETARG_INT32(1);
	bytea	   *data = PG_GETARG_BYTEA_PP(2);
	XLogRecPtr	lsn;

	if (rmid < 0 || rmid > 255 || info < 0 || info > 255)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rmid and info must be between 0 and 255")));

	XLogBeginInsert();
	XLogRegisterData(VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data));
	lsn = XLogInsert((RmgrId) rmid, (uint8) info);
	XLogFlush(lsn);

	PG_RETURN_LSN(lsn);
}
