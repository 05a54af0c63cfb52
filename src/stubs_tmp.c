/* temporary stubs, replaced by the helpers' files */
#include "postgres.h"
#include "fencing.h"
#include "fmgr.h"
#include "common/hashfn.h"
int fencing_canonical_name(Datum name, char *buf) { elog(ERROR, "not yet"); return 0; }
int64 fencing_key_of_canonical(const char *buf, int len) { return (int64) hash_any_extended((const unsigned char *) buf, len, 0); }
void fencing_locks_init(void) {}
void fencing_lock_registry_init(void) {}
int fencing_lock_registry_capacity(void) { return 0; }
int fencing_lock_registry_count(void) { return 0; }
int64 fencing_lock_registry_untracked(void) { return 0; }
void fencing_fence_init(void) {}
PG_FUNCTION_INFO_V1(fencing_normalize_name);
Datum fencing_normalize_name(PG_FUNCTION_ARGS);
Datum fencing_normalize_name(PG_FUNCTION_ARGS) { elog(ERROR, "not yet"); PG_RETURN_NULL(); }
PG_FUNCTION_INFO_V1(fencing_lock_key);
Datum fencing_lock_key(PG_FUNCTION_ARGS);
Datum fencing_lock_key(PG_FUNCTION_ARGS) { elog(ERROR, "not yet"); PG_RETURN_NULL(); }
PG_FUNCTION_INFO_V1(fencing_try_lock);
Datum fencing_try_lock(PG_FUNCTION_ARGS);
Datum fencing_try_lock(PG_FUNCTION_ARGS) { elog(ERROR, "not yet"); PG_RETURN_NULL(); }
PG_FUNCTION_INFO_V1(fencing_lock);
Datum fencing_lock(PG_FUNCTION_ARGS);
Datum fencing_lock(PG_FUNCTION_ARGS) { elog(ERROR, "not yet"); PG_RETURN_NULL(); }
PG_FUNCTION_INFO_V1(fencing_lease);
Datum fencing_lease(PG_FUNCTION_ARGS);
Datum fencing_lease(PG_FUNCTION_ARGS) { elog(ERROR, "not yet"); PG_RETURN_NULL(); }
PG_FUNCTION_INFO_V1(fencing_held_token);
Datum fencing_held_token(PG_FUNCTION_ARGS);
Datum fencing_held_token(PG_FUNCTION_ARGS) { elog(ERROR, "not yet"); PG_RETURN_NULL(); }
PG_FUNCTION_INFO_V1(fencing_lock_rows);
Datum fencing_lock_rows(PG_FUNCTION_ARGS);
Datum fencing_lock_rows(PG_FUNCTION_ARGS) { elog(ERROR, "not yet"); PG_RETURN_NULL(); }
