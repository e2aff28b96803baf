"""What people read: the side-by-side samples (`generation_run`, `generation_markdown`), the
training metrics and curves (`training_report`) and the study across models (`study`)."""
