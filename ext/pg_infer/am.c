/* pg_infer: the "infer" index access method — ORDER BY col <~> 'query' as an index scan.
 *
 *   CREATE INDEX ON products USING infer (name) WITH (model = 'bitnet');
 *   SELECT name FROM products ORDER BY name <~> 'fruit' LIMIT 5;
 *
 * The index stores no vectors: one metapage naming the model (reloption "model", else
 * infer.default_model when the index is built; unknown reloptions are rejected). The first
 * amgettuple reads the heap with the scan's snapshot, scores every row's text against the
 * query with that model (similar_to, distance 1/(1+score) like <~>), sorts, and then hands
 * the rows out in distance order; rows whose column is NULL come last (their distance is
 * NULL, as the STRICT operator gives). The operator evaluated outside an index uses
 * infer.default_model, so the planner only considers an index built for that model (other
 * indexes cost disable_cost), and a scan scores with the operator's model (a cached plan
 * keeps answering as a sequential scan would). The cost estimate is honest: all
 * work happens before the first row, at the operator's cost per row, so the planner picks
 * the index only where it saves the sort. */
#include "pg_infer.h"

#include <float.h>

#include "access/amapi.h"
#include "access/generic_xlog.h"
#include "access/reloptions.h"
#include "access/relscan.h"
#include "access/tableam.h"
#include "access/xloginsert.h"
#include "catalog/index.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/pathnodes.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "storage/bufmgr.h"
#include "storage/smgr.h"
#include "utils/builtins.h"
#include "utils/rel.h"

#define INFER_AM_MAGIC 0x494E4652	/* "INFR" */
#define INFER_AM_VERSION 1
#define INFER_AM_NAME_MAX 248

typedef struct InferMeta
{
	uint32		magic;
	uint32		version;
	char		model[INFER_AM_NAME_MAX];
} InferMeta;

typedef struct InferOptions
{
	int32		vl_len_;
	int			model_offset;	/* 0 when not set */
} InferOptions;

static relopt_kind infer_relopt_kind;

void
pgi_am_init(void)
{
	infer_relopt_kind = add_reloption_kind();
	add_string_reloption(infer_relopt_kind, "model", "Registered model the index orders by", NULL, NULL,
						 AccessExclusiveLock);
}

static bytea *
infer_options(Datum reloptions, bool validate)
{
	static const relopt_parse_elt tab[] = {
		{"model", RELOPT_TYPE_STRING, offsetof(InferOptions, model_offset)},
	};

	return (bytea *) build_reloptions(reloptions, validate, infer_relopt_kind, sizeof(InferOptions), tab,
									  lengthof(tab));
}

/* The model an index is built for: its reloption, else infer.default_model; it must be
 * registered. */
static void
build_meta(Relation index, InferMeta *meta)
{
	InferOptions *o = (InferOptions *) index->rd_options;
	const char *model = o && o->model_offset ? (const char *) o + o->model_offset : NULL;

	if (model == NULL || model[0] == 0)
		model = pgi_default_model;
	if (model == NULL || model[0] == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("INFER ambuild: no model: give WITH (model = '...') or SET infer.default_model")));
	if (strlen(model) >= INFER_AM_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("INFER ambuild: model name longer than %d bytes", INFER_AM_NAME_MAX - 1)));
	if (pgi_registry_exec("SELECT 1 FROM infer.models WHERE model_name = $1", model, SPI_OK_SELECT) == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("INFER ambuild: model not found: %s", model)));
	memset(meta, 0, sizeof *meta);
	meta->magic = INFER_AM_MAGIC;
	meta->version = INFER_AM_VERSION;
	strlcpy(meta->model, model, sizeof meta->model);
}

static void
fill_metapage(Page page, const InferMeta *meta)
{
	PageInit(page, BLCKSZ, 0);
	memcpy(PageGetContents(page), meta, sizeof *meta);
	((PageHeader) page)->pd_lower = (char *) PageGetContents(page) + sizeof *meta - (char *) page;
}

static IndexBuildResult *
infer_build(Relation heap, Relation index, IndexInfo *info)
{
	InferMeta	meta;
	Buffer		buf;
	GenericXLogState *st;
	Page		page;
	IndexBuildResult *res;

	if (info->ii_NumIndexAttrs != 1 || info->ii_IndexAttrNumbers[0] == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("an infer index covers exactly one text column (no expressions)")));
	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));
	build_meta(index, &meta);
	buf = ReadBufferExtended(index, MAIN_FORKNUM, P_NEW, RBM_NORMAL, NULL);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	st = GenericXLogStart(index);
	page = GenericXLogRegisterBuffer(st, buf, GENERIC_XLOG_FULL_IMAGE);
	fill_metapage(page, &meta);
	GenericXLogFinish(st);
	UnlockReleaseBuffer(buf);
	res = palloc0(sizeof *res);
	res->heap_tuples = heap->rd_rel->reltuples > 0 ? heap->rd_rel->reltuples : 0;
	res->index_tuples = 0;
	return res;
}

/* Unlogged tables: the metapage goes to the init fork. */
static void
infer_buildempty(Relation index)
{
	InferMeta	meta;
	Page		page = (Page) palloc(BLCKSZ);

	build_meta(index, &meta);
	fill_metapage(page, &meta);
	PageSetChecksumInplace(page, 0);
	smgrwrite(RelationGetSmgr(index), INIT_FORKNUM, 0, (char *) page, true);
	log_newpage(&(RelationGetSmgr(index))->smgr_rnode.node, INIT_FORKNUM, 0, page, true);
	smgrimmedsync(RelationGetSmgr(index), INIT_FORKNUM);
}

static bool
infer_insert(Relation index, Datum *values, bool *isnull, ItemPointer tid, Relation heap,
			 IndexUniqueCheck check, bool indexUnchanged, IndexInfo *info)
{
	return false;				/* nothing stored per row: scans read the heap */
}

static IndexBulkDeleteResult *
infer_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats, IndexBulkDeleteCallback cb, void *cb_state)
{
	return stats ? stats : palloc0(sizeof(IndexBulkDeleteResult));
}

static IndexBulkDeleteResult *
infer_vacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats)
{
	if (stats == NULL)
	{
		stats = palloc0(sizeof *stats);
		stats->num_pages = RelationGetNumberOfBlocks(info->index);
	}
	return stats;
}

/* The model named in an index's metapage ("" when the metapage is not valid). */
static void
read_meta_model(Relation index, char *out)
{
	Buffer		buf = ReadBuffer(index, 0);
	InferMeta	meta;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(&meta, PageGetContents(BufferGetPage(buf)), sizeof meta);
	UnlockReleaseBuffer(buf);
	out[0] = 0;
	if (meta.magic == INFER_AM_MAGIC && meta.version == INFER_AM_VERSION)
	{
		meta.model[INFER_AM_NAME_MAX - 1] = 0;
		strlcpy(out, meta.model, INFER_AM_NAME_MAX);
	}
}

/* Every row costs one similar_to (the operator's COST 10000) before the first row comes out. */
static void
infer_costestimate(PlannerInfo *root, IndexPath *path, double loop_count, Cost *startup, Cost *total,
				   Selectivity *sel, double *corr, double *pages)
{
	double		tuples = path->indexinfo->rel->tuples > 0 ? path->indexinfo->rel->tuples : 1000;
	char		model[INFER_AM_NAME_MAX];
	Relation	index;

	*sel = 1.0;
	*corr = 0;
	*pages = 1;
	if (path->indexorderbys == NIL)
	{
		/* no ORDER BY <~>: the index answers nothing */
		*startup = *total = disable_cost;
		return;
	}
	/* <~> outside an index orders by infer.default_model: an index built for another model
	 * would answer another order, so the planner is steered away from it (the planner holds
	 * a lock on the index already) */
	index = index_open(path->indexinfo->indexoid, NoLock);
	read_meta_model(index, model);
	index_close(index, NoLock);
	if (pgi_default_model == NULL || strcmp(model, pgi_default_model) != 0)
	{
		*startup = *total = disable_cost;
		return;
	}
	*startup = random_page_cost + tuples * (10000 * cpu_operator_cost + cpu_tuple_cost);
	*total = *startup + tuples * cpu_index_tuple_cost;
}

static bool
infer_validate(Oid opclassoid)
{
	return true;
}

typedef struct InferHit
{
	ItemPointerData tid;
	double		dist;
	bool		isnull;
} InferHit;

typedef struct InferScan
{
	char		model[INFER_AM_NAME_MAX];
	MemoryContext cxt;
	InferHit   *hits;
	int			n,
				next;
	bool		done;
} InferScan;

static IndexScanDesc
infer_beginscan(Relation index, int nkeys, int norderbys)
{
	IndexScanDesc scan = RelationGetIndexScan(index, nkeys, norderbys);
	InferScan  *so = palloc0(sizeof *so);

	read_meta_model(index, so->model);
	if (so->model[0] == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("INFER: index \"%s\" has no valid metapage", RelationGetRelationName(index))));
	so->cxt = CurrentMemoryContext;
	scan->opaque = so;
	if (norderbys > 0)
	{
		scan->xs_orderbyvals = palloc0(sizeof(Datum) * norderbys);
		scan->xs_orderbynulls = palloc(sizeof(bool) * norderbys);
		memset(scan->xs_orderbynulls, true, sizeof(bool) * norderbys);
	}
	return scan;
}

static void
infer_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys)
{
	InferScan  *so = scan->opaque;

	if (keys && scan->numberOfKeys > 0)
		memmove(scan->keyData, keys, scan->numberOfKeys * sizeof(ScanKeyData));
	if (orderbys && scan->numberOfOrderBys > 0)
		memmove(scan->orderByData, orderbys, scan->numberOfOrderBys * sizeof(ScanKeyData));
	if (so->hits)
		pfree(so->hits);
	so->hits = NULL;
	so->n = so->next = 0;
	so->done = false;
}

static int
cmp_hit(const void *a, const void *b)
{
	const InferHit *x = a,
			   *y = b;

	if (x->isnull != y->isnull)
		return x->isnull ? 1 : -1;
	if (!x->isnull && x->dist != y->dist)
		return x->dist < y->dist ? -1 : 1;
	return ItemPointerCompare((ItemPointer) &x->tid, (ItemPointer) &y->tid);
}

/* Scores every visible row of the heap against the query (the scan's snapshot); a NULL
 * query gives every row a NULL distance, as the STRICT operator does. */
static void
infer_score_all(IndexScanDesc scan, const char *query)
{
	InferScan  *so = scan->opaque;
	Relation	heap = scan->heapRelation;
	AttrNumber	att = scan->indexRelation->rd_index->indkey.values[0];
	/* the model <~> itself would use (infer.default_model, or its ERROR when unset): the
	 * planner only picks this index when that is the index's model, and a plan cached
	 * before the setting changed still answers as a sequential scan would */
	PgiModel   *m = query ? pgi_model_arg(NULL, -1) : NULL;
	TableScanDesc hs;
	TupleTableSlot *slot;
	int			cap = 256;
	MemoryContext old = MemoryContextSwitchTo(so->cxt);

	so->hits = palloc(sizeof(InferHit) * cap);
	MemoryContextSwitchTo(old);
	slot = table_slot_create(heap, NULL);
	hs = table_beginscan(heap, scan->xs_snapshot, 0, NULL);
	while (table_scan_getnextslot(hs, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		d = slot_getattr(slot, att, &isnull);
		InferHit   *h;

		CHECK_FOR_INTERRUPTS();
		if (so->n == cap)
		{
			cap *= 2;
			so->hits = repalloc(so->hits, sizeof(InferHit) * cap);
		}
		h = &so->hits[so->n++];
		h->tid = slot->tts_tid;
		h->isnull = isnull || query == NULL;
		h->dist = 0;
		if (!h->isnull)
		{
			char	   *s = TextDatumGetCString(d);
			double		score = pgi_similar(m, s, query);

			h->dist = score > 0 ? 1.0 / (1.0 + score) : DBL_MAX;
			pfree(s);
		}
	}
	table_endscan(hs);
	ExecDropSingleTupleTableSlot(slot);
	qsort(so->hits, so->n, sizeof(InferHit), cmp_hit);
}

static bool
infer_gettuple(IndexScanDesc scan, ScanDirection dir)
{
	InferScan  *so = scan->opaque;
	InferHit   *h;

	if (!so->done)
	{
		ScanKey		ob = scan->numberOfOrderBys > 0 ? &scan->orderByData[0] : NULL;

		so->done = true;
		if (ob == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("INFER: an infer index only answers ORDER BY col <~> 'query'")));
		infer_score_all(scan, ob->sk_flags & SK_ISNULL ? NULL : TextDatumGetCString(ob->sk_argument));
	}
	if (so->next >= so->n)
		return false;
	h = &so->hits[so->next++];
	scan->xs_heaptid = h->tid;
	scan->xs_recheck = false;
	scan->xs_recheckorderby = false;
	scan->xs_orderbyvals[0] = Float8GetDatum(h->dist);
	scan->xs_orderbynulls[0] = h->isnull;
	return true;
}

static void
infer_endscan(IndexScanDesc scan)
{
	InferScan  *so = scan->opaque;

	if (so->hits)
		pfree(so->hits);
	pfree(so);
	scan->opaque = NULL;
}

PG_FUNCTION_INFO_V1(pgi_am_handler);

Datum
pgi_am_handler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *am = makeNode(IndexAmRoutine);

	am->amstrategies = 1;
	am->amsupport = 0;
	am->amoptsprocnum = 0;
	am->amcanorder = false;
	am->amcanorderbyop = true;
	am->amcanbackward = false;
	am->amcanunique = false;
	am->amcanmulticol = false;
	am->amoptionalkey = true;
	am->amsearcharray = false;
	am->amsearchnulls = false;
	am->amstorage = false;
	am->amclusterable = false;
	am->ampredlocks = false;
	am->amcanparallel = false;
	am->amcaninclude = false;
	am->amusemaintenanceworkmem = false;
	am->amparallelvacuumoptions = 0;
	am->amkeytype = InvalidOid;

	am->ambuild = infer_build;
	am->ambuildempty = infer_buildempty;
	am->aminsert = infer_insert;
	am->ambulkdelete = infer_bulkdelete;
	am->amvacuumcleanup = infer_vacuumcleanup;
	am->amcanreturn = NULL;
	am->amcostestimate = infer_costestimate;
	am->amoptions = infer_options;
	am->amproperty = NULL;
	am->ambuildphasename = NULL;
	am->amvalidate = infer_validate;
	am->amadjustmembers = NULL;
	am->ambeginscan = infer_beginscan;
	am->amrescan = infer_rescan;
	am->amgettuple = infer_gettuple;
	am->amgetbitmap = NULL;
	am->amendscan = infer_endscan;
	am->ammarkpos = NULL;
	am->amrestrpos = NULL;
	am->amestimateparallelscan = NULL;
	am->aminitparallelscan = NULL;
	am->amparallelrescan = NULL;
	PG_RETURN_POINTER(am);
}
