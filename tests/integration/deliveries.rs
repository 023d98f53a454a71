//! The seed's replay figure (`ackgap deliveries`): one job delivered N times
//! to a consumer, a crash in the ack gap before every ack but the last. And
//! the driver's pipelined read-back survives a `SCRIPT FLUSH` mid-run.

use crate::common; // the server matrix (`start`) and fresh queue names

use std::sync::Arc;

use ackgap::consumer::Kind;
use ackgap::explore::{deliveries, Driver, DriverConfig, Outcome, Step, Subject};
use ackgap::history::Recorder;
use ackgap::queue::Queue;
use ackgap::server::Persistence;
use common::Backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marker_turns_n_deliveries_into_one_effect_and_naive_into_n() {
    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    let on = |kind: Kind| {
        Subject::new(
            Arc::new(ackgap::adapter::Reference::new(queue.clone())),
            Arc::from(kind.consumer()),
        )
    };
    let marker = deliveries(&on(Kind::Marker), 6).await.unwrap();
    assert_eq!((marker.deliveries, marker.effects), (6, 1), "{marker:?}");
    assert_eq!(marker.state, "done");
    assert!(marker.effect_once);

    let naive = deliveries(&on(Kind::Naive), 6).await.unwrap();
    assert_eq!((naive.deliveries, naive.effects), (6, 6), "{naive:?}");
    assert_eq!(naive.state, "done");
    assert!(!naive.effect_once);

    // Natural: one value, however often it is written.
    let natural = deliveries(&on(Kind::Natural), 3).await.unwrap();
    assert_eq!((natural.deliveries, natural.effects), (3, 1));
    assert!(deliveries(&on(Kind::Marker), 0).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flush_between_checked_steps_is_reloaded_and_the_queue_still_refines_the_model() {
    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    let config = DriverConfig {
        workers: 2,
        lease_ms: 100,
        max_attempts: 3,
        reap_limit: 2,
    };
    let mut driver = Driver::start(&queue, config, Recorder::in_memory())
        .await
        .unwrap();
    let flush = || async {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut queue.connection())
            .await
            .unwrap();
    };
    flush().await;
    let steps = [
        Step::Enqueue { job: 0 },
        Step::Enqueue { job: 1 },
        Step::Lease { worker: 0 },
        Step::Crash { worker: 0 },
        Step::Tick { ms: 100 },
        Step::Reap,
        Step::Lease { worker: 1 },
        Step::Complete { worker: 1 },
    ];
    for (i, step) in steps.iter().enumerate() {
        if i % 3 == 2 {
            flush().await;
        }
        driver.apply(step).await.unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(matches!(
        driver.apply(&Step::Lease { worker: 0 }).await.unwrap(),
        Outcome::Lease(Some(_))
    ));
}
