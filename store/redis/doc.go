// Package redisstore (directory store/redis) is the shared store.Store for several API
// replicas: Redis through go-redis v9. Keys are "<namespace>:<key>". Telemetry sits at
// one seam, a go-redis hook that opens a "redis.<COMMAND>" span and records
// tuft.redis.operation.duration. The package is named redisstore, not redis, so that it
// does not shadow go-redis's package redis in its own files and its callers'.
package redisstore
