/*-------------------------------------------------------------------------
 *
 * module.h
 *		The top layer of the fencing extension: the entry point, the hooks
 *		that dispatch statement events to the layers below, and the views
 *		that read every layer.
 *
 *	fencing.c	_PG_init: refuse to load unless preloaded, then each
 *				layer's initialisation, lowest first
 *	hooks.c		the executor, utility and object access hooks
 *	views.c		fencing.status() and the rows of the view fencing.locks
 *
 * Nothing calls into this layer; it calls every layer below.
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		src/module/module.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCING_MODULE_H
#define FENCING_MODULE_H

#include "fence/fence.h"

/* hooks.c */
extern void fencing_hooks_init(void);

#endif							/* FENCING_MODULE_H */
