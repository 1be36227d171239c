#!/usr/bin/env node
// Transactions with KafkaJS (issue 27), a third client implementation beside librdkafka and the
// Python ones, through the brokers given: a transactional producer commits a transaction over both
// partitions of TOPIC and aborts another; a second producer of the same transactional id fences
// the first (its next transaction fails); a read_committed consumer in a group reads exactly the
// committed records, a read_uncommitted one the aborted ones too; and a consume-transform-produce
// step sends the group's offsets with its transaction (sendOffsets).
//
// Usage: node transactions.js BROKERS TOPIC
// Prints "ok: ..." per check; exits 1 with "FAILED: ..." on the first failed one.

const { Kafka, logLevel } = require('kafkajs')

const [brokers, topic] = process.argv.slice(2)
const kafka = new Kafka({
  clientId: 'kafkajs-txn',
  brokers: brokers.split(','),
  logLevel: logLevel.NOTHING,
  retry: { retries: 8, initialRetryTime: 100 },
})

function check(cond, what) {
  if (!cond) {
    console.log('FAILED: ' + what)
    process.exit(1)
  }
  console.log('ok: ' + what)
}

function txnProducer() {
  return kafka.producer({ transactionalId: 'tx-kafkajs', idempotent: true, maxInFlightRequests: 1 })
}

// Reads TOPIC from the start in a fresh group until `want` values came (then 1.5 s more, for
// anything that should not be there) or 30 s passed.
async function readAll(group, readUncommitted, want) {
  const consumer = kafka.consumer({ groupId: group, readUncommitted, sessionTimeout: 10000 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const got = []
  let enoughAt = null
  await consumer.run({
    eachMessage: async ({ message }) => {
      got.push(message.value.toString())
    },
  })
  const deadline = Date.now() + 30000
  while (Date.now() < deadline) {
    if (got.length >= want && enoughAt === null) enoughAt = Date.now()
    if (enoughAt !== null && Date.now() - enoughAt > 1500) break
    await new Promise((r) => setTimeout(r, 100))
  }
  await consumer.disconnect()
  return got.sort()
}

async function main() {
  const p = txnProducer()
  await p.connect()

  let t = await p.transaction()
  await t.send({ topic, messages: [{ value: 'js-0', partition: 0 }, { value: 'js-1', partition: 1 }] })
  await t.send({ topic, messages: [{ value: 'js-2', partition: 0 }] })
  await t.commit()
  check(true, 'KafkaJS: a transaction over both partitions committed')

  t = await p.transaction()
  await t.send({ topic, messages: [{ value: 'jx-0', partition: 0 }, { value: 'jx-1', partition: 1 }] })
  await t.abort()
  check(true, 'KafkaJS: a transaction aborted')

  // Consume-transform-produce: the group's offsets committed with the transaction.
  t = await p.transaction()
  await t.send({ topic, messages: [{ value: 'js-3', partition: 1 }] })
  await t.sendOffsets({ consumerGroupId: 'kafkajs-ctp', topics: [{ topic, partitions: [{ partition: 0, offset: '2' }] }] })
  await t.commit()
  const admin = kafka.admin()
  await admin.connect()
  const offsets = await admin.fetchOffsets({ groupId: 'kafkajs-ctp', topics: [topic] })
  const p0 = offsets[0].partitions.find((x) => x.partition === 0)
  check(p0 && p0.offset === '2', 'KafkaJS: sendOffsets committed the group offset with the transaction: ' + JSON.stringify(offsets))
  await admin.disconnect()

  // A second producer of the same transactional id fences the first (KafkaJS sends
  // InitProducerId at its first transaction).
  const p2 = txnProducer()
  await p2.connect()
  const t2 = await p2.transaction()
  let fenced = null
  try {
    t = await p.transaction()
    await t.send({ topic, messages: [{ value: 'zombie', partition: 0 }] })
    await t.commit()
  } catch (e) {
    fenced = e.type || e.name
  }
  check(fenced !== null, 'KafkaJS: the older producer of the transactional id is fenced (' + fenced + ')')
  await t2.send({ topic, messages: [{ value: 'js-4', partition: 1 }] })
  await t2.commit()
  await p2.disconnect()
  await p.disconnect().catch(() => {})

  const committed = ['js-0', 'js-1', 'js-2', 'js-3', 'js-4']
  const got = await readAll('kafkajs-committed', false, committed.length)
  check(JSON.stringify(got) === JSON.stringify(committed), 'KafkaJS read_committed: exactly the committed records: ' + got)
  const all = await readAll('kafkajs-uncommitted', true, committed.length + 2)
  check(all.includes('jx-0') && all.includes('jx-1') && committed.every((v) => all.includes(v)),
    'KafkaJS read_uncommitted: the aborted records too: ' + all)
  console.log('all KafkaJS transaction checks passed')
}

main().catch((e) => {
  console.log('FAILED: ' + (e.stack || e))
  process.exit(1)
})
